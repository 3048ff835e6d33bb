"""The CLI is a thin shell: it uses venturi's public surface, and the library
never imports it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The public package plus the helpers the CLI is meant to share with it: its config
# helpers, logging setup, the task registry, the embedded server and examples that
# `venturi dev` runs, the dashboard and its server that `venturi web` runs, the
# process-wide record of stop signals that the console script takes before anything
# heavy is imported (venturi.cli.main), and the Django project `venturi worker
# --django` runs the tasks of.
ALLOWED = {"venturi", "venturi.config", "venturi.logs", "venturi.task",
           "venturi.embedded", "venturi.examples", "venturi.web", "venturi.web.server",
           "venturi.worker.signals", "venturi.contrib.django.project"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _reach_throughs(source: str) -> list[str]:
    """What a piece of CLI source takes from venturi that is not its public surface: a
    private module or name (``venturi._codec``, ``from venturi.config import _UNITS``),
    ``venturi.<name>`` outside ``venturi.__all__``, or a store reached through a queue
    (``queue.store``, ``q.store.notify_control``): the store is the library's own."""
    import venturi

    public = set(venturi.__all__)
    bad: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            bad += [n for n in names if n.startswith("venturi.") and n not in ALLOWED]
            bad += [n for n in names if any(p.startswith("_") for p in n.split("."))]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module == "venturi" or module.startswith("venturi."):
                if module not in ALLOWED:
                    bad.append(module)
                bad += [f"{module}.{a.name}" for a in node.names if a.name.startswith("_")]
                if module == "venturi":
                    bad += [f"venturi.{a.name}" for a in node.names
                            if a.name not in public and f"venturi.{a.name}" not in ALLOWED]
        elif isinstance(node, ast.Attribute):
            if node.attr == "store":
                bad.append(f"{ast.unparse(node)} (a store reached through the queue)")
            elif (isinstance(node.value, ast.Name) and node.value.id == "venturi"
                  and node.attr not in public and f"venturi.{node.attr}" not in ALLOWED):
                bad.append(ast.unparse(node))
    return bad


def test_cli_imports_only_the_public_api() -> None:
    used = set()
    for path in (ROOT / "cli").glob("*.py"):
        used |= {m for m in _imports(path) if m == "venturi" or m.startswith("venturi.")}
    assert used and used <= ALLOWED, sorted(used - ALLOWED)


def test_cli_reaches_nothing_private() -> None:
    found = {path.name: bad for path in sorted((ROOT / "cli").glob("*.py"))
             if (bad := _reach_throughs(path.read_text()))}
    assert found == {}


@pytest.mark.parametrize("source", [
    "import venturi._codec",
    "from venturi import _codec",
    "from venturi.config import _UNITS",
    "from venturi.store.base import Store",
    "import venturi.worker.claimer",
    "from venturi import Worker, notices",
    "venturi.notices.drain_message()",
    "async def go(queue):\n    await queue.store.notify_control({})",
    "def f(q):\n    return q.store",
])
def test_the_reach_through_check_sees(source: str) -> None:
    assert _reach_throughs(source)


def test_the_reach_through_check_lets_the_public_api_through() -> None:
    assert _reach_throughs(
        "import venturi\nimport venturi.logs\nfrom venturi.config import mask_dsn\n"
        "venturi.Worker.handling_signals()\nventuri.logs.configure()\n"
        "async def go(queue):\n    await queue.drain('w', grace=1)\n") == []


def test_library_never_imports_the_cli() -> None:
    for path in (ROOT / "venturi").rglob("*.py"):
        assert not any("cli" in m.split(".") for m in _imports(path)), path
    code = ("import sys, venturi, venturi.worker, venturi.logs; "
            "sys.exit(any(m.startswith('venturi.cli') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
