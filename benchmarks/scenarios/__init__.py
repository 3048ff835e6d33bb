"""Every scenario module, imported so that its scenarios register themselves."""

from . import enqueue, flow, logs, peers, producers, scaleout, tracing, worker, workflows

__all__ = ["enqueue", "flow", "logs", "peers", "producers", "scaleout", "tracing", "worker",
           "workflows"]
