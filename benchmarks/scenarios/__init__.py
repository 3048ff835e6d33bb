"""Every scenario module, imported so that its scenarios register themselves."""

from . import enqueue, logs, worker

__all__ = ["enqueue", "logs", "worker"]
