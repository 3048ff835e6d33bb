"""Every ```python block of the docs and the README runs, so the docs cannot rot.

Conventions (docs/index.md of the contributors' notes is this docstring):

- Blocks of one page run in order, each in its own interpreter (the task
  registry refuses a kind defined twice in one process), in one scratch
  directory that is on ``PYTHONPATH``.
- A block preceded by ``<!-- snippet: file NAME.py -->`` is written to that
  file (later blocks import it) and then run once as a script.
- A block preceded by ``<!-- snippet: skip REASON -->`` is not run; the reason
  is mandatory. Use it sparingly: partial fragments, framework glue.
- A block that talks to PostgreSQL says so in two plain lines a reader can
  copy, ``DSN = "..."`` and ``PREFIX = "..."``; the test rewrites both to the
  test database and to one fresh prefix per page (dropped afterwards), so the
  docs never touch a real queue.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import drop_prefix, new_prefix

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<verb>\w+)\s*(?P<arg>.*?)\s*-->\s*$")
DSN_LINE = re.compile(r'^DSN = "[^"\n]*"', re.MULTILINE)
PREFIX_LINE = re.compile(r'^PREFIX = "[^"\n]*"', re.MULTILINE)
TIMEOUT = 90


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    verb: str | None  # None (run), "file" or "skip"
    arg: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def snippets(page: Path) -> list[Snippet]:
    """The python blocks of ``page``, with the marker comment before each, if any."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, lang = match.group("indent"), match.group("lang")
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if lang == "python":
            body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:end]]
            verb, arg = None, ""
            back = i - 1
            while back >= 0 and not lines[back].strip():
                back -= 1
            marker = MARKER.match(lines[back]) if back >= 0 else None
            if marker:
                verb, arg = marker.group("verb"), marker.group("arg")
            found.append(Snippet(page, i + 1, textwrap.dedent("\n".join(body)) + "\n", verb, arg))
        i = end + 1
    return found


def pages_with_code() -> list[Path]:
    """Pages with at least one block to run (a page of skipped fragments has nothing to test)."""
    return [p for p in PAGES if any(s.verb != "skip" for s in snippets(p))]


def test_the_docs_have_snippets_and_every_marker_is_valid() -> None:
    all_snippets = [s for p in PAGES for s in snippets(p)]
    assert len(all_snippets) >= 20, "the snippet extractor found almost nothing"
    for s in all_snippets:
        assert s.verb in (None, "file", "skip"), f"{s.where}: unknown marker {s.verb!r}"
        if s.verb == "skip":
            assert s.arg, f"{s.where}: `snippet: skip` needs a reason"
        if s.verb == "file":
            assert re.fullmatch(r"\w+\.py", s.arg), f"{s.where}: `snippet: file` needs NAME.py"
        if "Queue.connect(" in s.code and s.verb != "skip":
            # A block that opens a queue must name its prefix, or it would run
            # against the default queue of whatever database it is pointed at.
            assert PREFIX_LINE.search(s.code) and DSN_LINE.search(s.code), (
                f"{s.where}: a block that connects must define DSN and PREFIX lines")
    skipped = [s for s in all_snippets if s.verb == "skip"]
    assert len(skipped) * 5 <= len(all_snippets), "too many skipped snippets: test them"


def _run(snippet: Snippet, path: Path, cwd: Path, env: dict[str, str]) -> None:
    try:
        proc = subprocess.run(
            [sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True,
            timeout=TIMEOUT, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{snippet.where}: did not finish within {TIMEOUT}s\n{exc.stdout}\n{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(
            f"{snippet.where}: exited {proc.returncode}\n--- code ---\n{snippet.code}"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )


@pytest.mark.parametrize("page", pages_with_code(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_snippets_run(page: Path, pg_dsn: str, tmp_path: Path) -> None:
    prefix = new_prefix()
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("VENTURI_DSN", None)
    env.pop("VENTURI_PREFIX", None)
    try:
        for n, snippet in enumerate(snippets(page)):
            if snippet.verb == "skip":
                continue
            code = DSN_LINE.sub(lambda _m: f"DSN = {pg_dsn!r}", snippet.code)
            code = PREFIX_LINE.sub(lambda _m: f"PREFIX = {prefix!r}", code)
            name = snippet.arg if snippet.verb == "file" else f"snippet_{n}.py"
            path = tmp_path / name
            path.write_text(code, encoding="utf-8")
            _run(snippet, path, tmp_path, env)
    finally:
        asyncio.run(drop_prefix(pg_dsn, prefix))
