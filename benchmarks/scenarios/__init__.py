"""Every scenario module, imported so that its scenarios register themselves."""

from . import enqueue, logs, tracing, worker

__all__ = ["enqueue", "logs", "tracing", "worker"]
