"""Every scenario module, imported so that its scenarios register themselves."""

from . import enqueue, logs, producers, worker

__all__ = ["enqueue", "logs", "producers", "worker"]
