"""Where a run's time runs out: its local lease deadline and its task's timeout, and the
event-loop stalls that put leases at risk (docs/concepts/leases.md, "The local deadline").

A run past its local deadline (the send time of its last successful renewal plus two
thirds of its lease) is stopped before its lease can expire in the database, so no
other worker can have claimed it meanwhile; one past ``timeout=`` is stopped and fails
(docs/concepts/failures.md).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math

import anyio

from ..logs import get_logger
from .held import Held, HeldState

log = get_logger("venturi.worker")


class DeadlineWatcher:
    """One timer for the earliest due run, instead of a timer armed (and cancelled) per
    run: the executor calls :meth:`watch` as each run starts.

    The runs are kept in a heap by the due time each had when it started. A renewal only
    moves a run's due later, so an entry can come up early but never late: one whose run
    is still going when its time comes is put back at the run's due time now, one whose
    run has ended is dropped. A start costs a push, never a pass over every claim held
    (with a wide prefetch window, hundreds of buffered ones per run started); ended runs'
    entries are swept out once they outnumber the slots, so the heap stays the size of
    the slots, and holds no finished job past that."""

    def __init__(self, slots: int) -> None:
        self._heap: list[tuple[float, int, Held]] = []
        self._order = itertools.count()  # breaks ties: Held objects do not compare
        self._sweep_at = 2 * slots + 64  # entries, before the ended runs' are swept out
        self._changed = asyncio.Event()

    def watch(self, held: Held) -> None:
        """``held`` starts running now, and must stop at ``held.due`` (loop time)."""
        heap = self._heap
        due = held.due
        if not heap or due < heap[0][0]:
            self._changed.set()
        heapq.heappush(heap, (due, next(self._order), held))
        if len(heap) > self._sweep_at:
            heap[:] = [entry for entry in heap if _running(entry[2])]
            heapq.heapify(heap)

    async def run(self) -> None:
        clock = asyncio.get_running_loop().time
        heap = self._heap
        while True:
            self._changed.clear()
            now = clock()
            while heap and heap[0][0] <= now:
                _, _, held = heapq.heappop(heap)
                if _running(held) and not held.expire(now):  # renewed meanwhile
                    heapq.heappush(heap, (held.due, next(self._order), held))
            due = heap[0][0] if heap else math.inf
            with anyio.move_on_after(due - now if due < math.inf else math.inf):
                await self._changed.wait()


def _running(held: Held) -> bool:
    return held.state is HeldState.RUNNING and held.scope is not None


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
