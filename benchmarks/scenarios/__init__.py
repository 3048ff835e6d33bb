"""Every scenario module, imported so that its scenarios register themselves."""

from . import enqueue, flows, logs, producers, tracing, worker

__all__ = ["enqueue", "flows", "logs", "producers", "tracing", "worker"]
