"""The worker: claims, runs, settles, recovers and drains (one module per service; the
file names say which: claimer, slots, executor, settler, renewer, recovery, waker, ...)."""

from .config import WorkerConfig
from .health import Health
from .metrics import WorkerMetrics
from .worker import Worker

__all__ = ["Health", "Worker", "WorkerConfig", "WorkerMetrics"]
