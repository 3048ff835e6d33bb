"""The CLI is a thin shell: it uses venturi's public surface, and the library
never imports it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The public package plus the helpers the CLI is meant to share with it.
# The library's public modules: the package, its config helpers, logging setup, the task
# registry, the worker's metrics, and the embedded server and examples that `venturi dev` runs.
ALLOWED = {"venturi", "venturi.config", "venturi.logs", "venturi.task", "venturi.worker",
           "venturi.embedded", "venturi.examples", "venturi.web", "venturi.web.server"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_cli_imports_only_the_public_api() -> None:
    used = set()
    for path in (ROOT / "cli").glob("*.py"):
        used |= {m for m in _imports(path) if m == "venturi" or m.startswith("venturi.")}
    assert used and used <= ALLOWED, sorted(used - ALLOWED)


def test_library_never_imports_the_cli() -> None:
    for path in (ROOT / "venturi").rglob("*.py"):
        assert not any("cli" in m.split(".") for m in _imports(path)), path
    code = ("import sys, venturi, venturi.worker, venturi.logs; "
            "sys.exit(any(m.startswith('venturi.cli') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
