"""The worker supervisor: claims, runs, settles, recovers and drains."""

from .config import WorkerConfig
from .metrics import WorkerMetrics
from .supervisor import Health, Worker

__all__ = ["Health", "Worker", "WorkerConfig", "WorkerMetrics"]
