"""Every scenario module, imported so that its scenarios register themselves."""

from . import enqueue, logs, producers, tracing, worker

__all__ = ["enqueue", "logs", "producers", "tracing", "worker"]
