"""Where a run's time runs out: its local lease deadline and its task's timeout, and the
event-loop stalls that put leases at risk (docs/concepts/leases.md, "The local deadline").

A run past its local deadline (the send time of its last successful renewal plus two
thirds of its lease) is stopped before its lease can expire in the database, so no
other worker can have claimed it meanwhile; one past ``timeout=`` is stopped and fails
(docs/concepts/failures.md).
"""

from __future__ import annotations

import asyncio
import math

import anyio

from ..logs import get_logger
from .held import HeldJobs, HeldState

log = get_logger("venturi.worker")


class DeadlineWatcher:
    """One timer for the earliest due run, instead of a timer armed (and cancelled) per
    run: the executor calls :meth:`watch` as each run starts."""

    def __init__(self, held: HeldJobs) -> None:
        self._held = held
        self._next = math.inf  # loop time of the next wake-up
        self._changed = asyncio.Event()

    def watch(self, due: float) -> None:
        """A run starting now must stop at ``due`` (loop time)."""
        if due < self._next:
            self._next = due
            self._changed.set()

    async def run(self) -> None:
        clock = asyncio.get_running_loop().time
        while True:
            self._changed.clear()
            now = clock()
            due = math.inf
            for held in list(self._held.by_id.values()):
                if (held.state is HeldState.RUNNING and held.scope is not None
                        and not held.expire(now)):
                    due = min(due, held.due)
            self._next = due
            with anyio.move_on_after(due - now if due < math.inf else math.inf):
                await self._changed.wait()


class StallMonitor:
    """Logs ``event_loop_stalled`` when the loop stalls longer than a third of the
    shortest lease: a blocking handler also stops every renewal of the worker."""

    def __init__(self, shortest_lease: float) -> None:
        self._threshold = shortest_lease / 3

    async def run(self) -> None:
        threshold = self._threshold
        tick = min(0.25, threshold / 2)
        while True:
            before = anyio.current_time()
            await anyio.sleep(tick)
            lag = anyio.current_time() - before - tick
            if lag > threshold:
                log.warning("event_loop_stalled", seconds=round(lag, 3),
                            note="a handler is blocking the event loop; leases are at risk")
