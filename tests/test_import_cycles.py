"""No import cycle inside ``venturi/``: imports flow one way (records and errors, tasks,
the store, the queue, the worker), so any module can be imported first and read on its
own. Checked statically over every ``import`` of the package, including those under
``if TYPE_CHECKING:`` and inside functions: a cycle hidden from the interpreter is still
one for a reader."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "venturi"


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str], root: Path = PACKAGE) -> Iterator[str]:
    """The package's modules that ``path`` imports: ``from a import b`` counts as module
    ``a.b`` when that is a module, else as ``a``."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = importlib.util.resolve_name("." * node.level + (node.module or ""),
                                                 package)
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # an attribute: its module
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): set(imported(p, modules, root)) for p in paths}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component that has one (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    edges = graph()
    assert edges.get("venturi.worker.worker")
    assert cycles(edges) == []


def test_the_check_sees_a_cycle_through_type_checking(tmp_path: Path) -> None:
    """Guard the guard: the cycle the settler once had (settler -> worker, only under
    TYPE_CHECKING; worker -> settler) and one through a relative ``from . import``."""
    pkg = tmp_path / "venturi"
    (pkg / "worker").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "worker" / "__init__.py").write_text("")
    (pkg / "worker" / "settler.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .worker import Worker\n")
    (pkg / "worker" / "worker.py").write_text("from .settler import Settler\n")
    (pkg / "worker" / "http.py").write_text("from . import config\n")
    (pkg / "worker" / "config.py").write_text(
        "def check():\n    from .http import parse_address\n")
    assert cycles(graph(pkg)) == [
        ["venturi.worker.config", "venturi.worker.http"],
        ["venturi.worker.settler", "venturi.worker.worker"],
    ]
