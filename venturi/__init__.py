"""venturi: a durable job queue for Python on PostgreSQL.

The names in ``__all__`` are the public contract (pinned by a test).

They are imported on first use (PEP 562): ``import venturi`` itself costs a
millisecond, so the ``venturi`` command can take SIGTERM before it has loaded the
driver, the worker and the CLI framework (a signal during a worker's start drains
it instead of killing it: docs/operations/deploys.md). ``from venturi import X``
and ``venturi.X`` work as with eager imports.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import (
        ConfigError,
        DatabaseConflict,
        DatabaseError,
        DatabaseUnavailable,
        InvalidJob,
        InvalidJobId,
        JobCancelled,
        JobFailed,
        PayloadDecodeError,
        SchemaMissing,
        TaskDefinitionError,
        UnknownKind,
        VenturiError,
    )
    from .newjob import Dependent
    from .queue import Page, Queue
    from .store.base import (
        Detail,
        Enqueued,
        FailedJob,
        FinishedMinute,
        JobRecord,
        JournalRecord,
        KindState,
        Limits,
        ManualClock,
        Outcome,
        Rate,
        Snapshot,
        Status,
        WorkerInfo,
    )
    from .store.memory import MemoryStore
    from .sync import SyncQueue
    from .task import Context, GiveUp, Keep, Merge, Pause, Priority, Replace, Task, With
    from .worker import Worker, WorkerConfig
    from .workflow import StepState, Workflow, WorkflowState

    __version__: str

# Where each public name lives (relative to this package).
_HOMES = {
    ".errors": ("ConfigError", "DatabaseConflict", "DatabaseError", "DatabaseUnavailable",
                "InvalidJob",
                "InvalidJobId", "JobCancelled", "JobFailed", "PayloadDecodeError",
                "SchemaMissing", "TaskDefinitionError", "UnknownKind", "VenturiError"),
    ".newjob": ("Dependent",),
    ".queue": ("Page", "Queue"),
    ".store.base": ("Detail", "Enqueued", "FailedJob", "FinishedMinute", "JobRecord",
                    "JournalRecord", "KindState", "Limits", "ManualClock", "Outcome", "Rate",
                    "Snapshot", "Status", "WorkerInfo"),
    ".store.memory": ("MemoryStore",),
    ".sync": ("SyncQueue",),
    ".task": ("Context", "GiveUp", "Keep", "Merge", "Pause", "Priority", "Replace", "Task",
              "With"),
    ".worker": ("Worker", "WorkerConfig"),
    ".workflow": ("StepState", "Workflow", "WorkflowState"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
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


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from ._version import package_version

        value: Any = package_version()
    elif name in _HOME:
        value = getattr(import_module(_HOME[name], __name__), name)
    elif not name.startswith("__"):
        # A submodule (``venturi.logs``, ``venturi.config``): eager imports used to bind
        # them as a side effect, and code written against that keeps working.
        try:
            value = import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
