"""venturi: a durable job queue for Python on PostgreSQL.

The names in ``__all__`` are the public contract (pinned by a test).
"""

from importlib.metadata import PackageNotFoundError, version

from .errors import (
    ConfigError,
    DatabaseError,
    DatabaseUnavailable,
    InvalidJob,
    InvalidJobId,
    PayloadDecodeError,
    SchemaMissing,
    TaskDefinitionError,
    UnknownKind,
    VenturiError,
)
from .queue import Page, Queue
from .store.base import (
    Detail,
    Enqueued,
    FailedJob,
    FinishedMinute,
    JobRecord,
    JournalRecord,
    ManualClock,
    Outcome,
    Snapshot,
    Status,
    WorkerInfo,
)
from .store.memory import MemoryStore
from .task import Context, GiveUp, Keep, Merge, Pause, Priority, Replace, Task, With
from .worker import Worker, WorkerConfig

try:
    __version__ = version("venturi")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "ConfigError",
    "Context",
    "DatabaseError",
    "DatabaseUnavailable",
    "Detail",
    "Enqueued",
    "FailedJob",
    "FinishedMinute",
    "GiveUp",
    "InvalidJob",
    "InvalidJobId",
    "JobRecord",
    "JournalRecord",
    "Keep",
    "ManualClock",
    "MemoryStore",
    "Merge",
    "Outcome",
    "Page",
    "Pause",
    "PayloadDecodeError",
    "Priority",
    "Queue",
    "Replace",
    "SchemaMissing",
    "Snapshot",
    "Status",
    "Task",
    "TaskDefinitionError",
    "UnknownKind",
    "VenturiError",
    "With",
    "Worker",
    "WorkerConfig",
    "WorkerInfo",
    "__version__",
]
