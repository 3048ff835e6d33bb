"""Every scenario module, imported so that its scenarios register themselves."""

from . import enqueue, worker

__all__ = ["enqueue", "worker"]
