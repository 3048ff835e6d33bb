"""The public surface and the direction of imports (one surface; imports point one way)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import venturi

ROOT = Path(__file__).resolve().parent.parent

PUBLIC = [
    "ConfigError",
    "Context",
    "DatabaseConflict",
    "DatabaseError",
    "DatabaseUnavailable",
    "Dependent",
    "Detail",
    "Enqueued",
    "FailedJob",
    "FinishedMinute",
    "GiveUp",
    "InvalidJob",
    "InvalidJobId",
    "JobCancelled",
    "JobFailed",
    "JobRecord",
    "JournalRecord",
    "Keep",
    "KindState",
    "Limits",
    "ManualClock",
    "MemoryStore",
    "Merge",
    "Outcome",
    "Page",
    "Pause",
    "PayloadDecodeError",
    "Priority",
    "Queue",
    "Rate",
    "Replace",
    "SchemaMissing",
    "Snapshot",
    "Status",
    "StepState",
    "SyncQueue",
    "Task",
    "TaskDefinitionError",
    "UnknownKind",
    "VenturiError",
    "With",
    "Worker",
    "WorkerConfig",
    "WorkerInfo",
    "Workflow",
    "WorkflowState",
    "__version__",
]


def test_public_names_are_pinned() -> None:
    # Changing the public surface must be a visible decision: edit this list with it.
    assert sorted(venturi.__all__) == PUBLIC
    assert len(set(venturi.__all__)) == len(venturi.__all__)
    for name in PUBLIC:
        assert hasattr(venturi, name), name


STORE_CONTRACT = [
    "Action", "ArrivalHook", "AsyncFn", "ClaimRequest", "CleanupCriteria", "Clock", "CountFilter",
    "DatabaseClock", "Detail", "Enqueued", "FailedJob", "FinishedMinute", "HistoryFilter",
    "IdentityLock", "JobRecord", "JournalRecord", "KeysetFilter", "KindChange", "KindState",
    "LeaseRenewal", "LimitedClaim", "Limits", "Listener", "Maintenance", "ManualClock", "MergeFn",
    "MergeUpdate", "NewJob", "NewJobBatch", "Outcome", "PlainJob", "Rate", "Recovered", "Settled",
    "Settlement", "Snapshot", "Status", "Store", "UTC", "WorkerInfo", "WorkflowRecord",
    "check_new_job_batch", "check_new_jobs", "check_plain_job",
]


def test_store_contract_names_are_pinned() -> None:
    # venturi.store.base names the whole storage contract, whichever module of
    # venturi/store/ defines each part: adapters, venturi.testing and users' fakes import
    # from it, so moving a name between those modules must leave this list alone.
    from venturi.store import base

    assert sorted(base.__all__) == STORE_CONTRACT
    for name in STORE_CONTRACT:
        assert hasattr(base, name), name


def test_every_error_derives_from_venturi_error() -> None:
    errors = [getattr(venturi, n) for n in PUBLIC if n.endswith("Error") or n in (
        "UnknownKind", "InvalidJob", "InvalidJobId", "SchemaMissing", "DatabaseUnavailable")]
    assert errors and all(issubclass(e, venturi.VenturiError) for e in errors)


def test_the_library_never_imports_the_cli() -> None:
    code = ("import venturi, venturi.store.postgres, venturi.queue, sys; "
            "assert not any(m.startswith('venturi.cli') or m == 'cli' for m in sys.modules), "
            "sorted(m for m in sys.modules if 'cli' in m)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def _imports(path: Path) -> set[str]:
    """Absolute module names imported by ``path`` (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_the_store_never_imports_the_queue_or_the_worker() -> None:
    files = sorted((ROOT / "venturi" / "store").glob("*.py"))
    assert files
    for path in files:
        bad = {m for m in _imports(path)
               if m.startswith(("venturi.queue", "venturi.worker", "venturi.cli"))}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_import_check_sees_relative_imports() -> None:
    # Guard the guard: queue.py imports the store, relatively.
    assert "venturi.store.base" in _imports(ROOT / "venturi" / "queue.py")


def test_public_names_and_submodules_resolve_lazily() -> None:
    """``import venturi`` loads nothing heavy; each public name, and each submodule
    reached as an attribute (``venturi.logs``), resolves on first use."""
    code = ("import sys, venturi; heavy = [m for m in ('asyncpg', 'venturi.queue') "
            "if m in sys.modules]; "
            "assert not heavy, heavy; "
            "[getattr(venturi, n) for n in venturi.__all__]; "
            "assert venturi.logs.configure and venturi.config.parse_duration; "
            "assert not hasattr(venturi, 'no_such_thing'); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, cwd=ROOT)
    assert out.stdout.strip() == "ok", out.stderr
