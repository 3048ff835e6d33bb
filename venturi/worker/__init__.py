"""The worker supervisor: claims, runs, settles, recovers and drains."""

from .config import WorkerConfig
from .health import Health
from .metrics import WorkerMetrics
from .worker import Worker

__all__ = ["Health", "Worker", "WorkerConfig", "WorkerMetrics"]
