"""The hand-written reference pages keep up with the code: every name of
``venturi.__all__`` has a ``::: `` entry under docs/reference, and every top-level
``venturi`` command has a section in docs/operations/cli.md."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import typer.main
from venturi.cli import app

import venturi

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
CLI_PAGE = ROOT / "docs" / "operations" / "cli.md"

DIRECTIVE = re.compile(r"^:::\s+(?P<path>[\w.]+)\s*$", re.MULTILINE)
HEADING = re.compile(r"^#{2,6}\s+(?P<text>.+)$", re.MULTILINE)
COMMAND_IN_HEADING = re.compile(r"`venturi (?P<command>[a-z][a-z0-9-]*)(?:\s[^`]*)?`")

_MISSING = object()


def directives(reference: Path) -> list[str]:
    """The dotted paths of every ``::: path`` line of the reference pages."""
    return [m["path"] for page in sorted(reference.rglob("*.md"))
            for m in DIRECTIVE.finditer(page.read_text(encoding="utf-8"))]


def resolve(path: str) -> Any:
    """The object a dotted path names (the longest importable module, then attributes),
    or ``_MISSING``."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                return _MISSING
        return obj
    return _MISSING


def undocumented(reference: Path) -> list[str]:
    """Names of ``venturi.__all__`` with no entry: ``::: venturi.NAME``, or
    ``::: venturi.<module>.NAME`` naming the same object (the pages use the first)."""
    paths = directives(reference)
    documented = set()
    for name in venturi.__all__:
        public = getattr(venturi, name)
        for path in paths:
            if path == f"venturi.{name}" or (
                    path.rsplit(".", 1)[-1] == name and resolve(path) is public):
                documented.add(name)
                break
    return sorted(set(venturi.__all__) - documented)


def commands() -> list[str]:
    """The top-level commands of the ``venturi`` Typer application."""
    group: Any = typer.main.get_command(app)
    return sorted(group.commands)


def commands_with_a_section(page: Path) -> set[str]:
    """Commands named as ``venturi COMMAND ...`` in a heading of ``page``."""
    return {c["command"] for h in HEADING.finditer(page.read_text(encoding="utf-8"))
            for c in COMMAND_IN_HEADING.finditer(h["text"])}


def test_every_public_name_has_a_reference_entry() -> None:
    missing = undocumented(REFERENCE)
    assert not missing, (
        f"in venturi.__all__ but on no page of {REFERENCE.relative_to(ROOT)} "
        f"(add a '::: venturi.NAME' line): {', '.join(missing)}")


def test_every_reference_entry_resolves() -> None:
    broken = [p for p in directives(REFERENCE) if resolve(p) is _MISSING]
    assert not broken, f"'::: ' entries naming nothing importable: {', '.join(broken)}"


def test_every_cli_command_has_a_section() -> None:
    found = commands()
    assert "worker" in found and "web" in found  # the app object is the real one
    missing = sorted(set(found) - commands_with_a_section(CLI_PAGE))
    assert not missing, (
        f"venturi commands with no '## `venturi COMMAND`' heading in "
        f"{CLI_PAGE.relative_to(ROOT)}: {', '.join(missing)}")
