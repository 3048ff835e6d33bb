"""Every scenario module, imported so that its scenarios register themselves.

Later scenarios of issue 6 (worker drain at concurrency 10/50, pickup latency,
backlog independence, memory, scale-out) go in new modules listed here.
"""

from . import enqueue

__all__ = ["enqueue"]
