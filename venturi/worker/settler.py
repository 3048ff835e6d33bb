"""Writing settlements in batches, and keeping them through a database outage.

Finished runs queue their settlement here; one loop writes whatever has
accumulated in a single ``settle_many`` round trip. A batch that is small while
runs are ending fast waits a little for more (``Settler._gather``): every write is
a commit, and several worker processes on one table are limited by how many
commits they make, not by how many jobs each carries. When the database is
unreachable the batch stays buffered (its jobs stay held, so their leases are
still renewed) and is written first after reconnecting (docs/concepts/failures.md,
"Losing the database is not a failure").

A settle and a lease renewal lock the same rows, the worker's own, each in the order
its plan visits them; two such statements at once can deadlock (40P01). So they take
turns on ``writes``, a lock the worker gives both (docs/concepts/leases.md, "Settling
in batches"). A batch that still loses a race to another session (an operator's
cancel, say) is sent again whole, and only split if it keeps losing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..errors import (
    CONFLICT_ATTEMPTS,
    DatabaseConflict,
    DatabaseError,
    DatabaseUnavailable,
    classify,
)
from ..logs import get_logger
from ..store.base import Settled, Settlement, Store
from .health import DatabaseHealth
from .identity import Identity

MAX_BATCH = 1000
# The longest a settlement waits for others to share its commit (docs/concepts/leases.md,
# "Settling in batches"): at most this, and never longer than the last write took.
GATHER_MAX = 0.005
log = get_logger("venturi.worker")

OnSettled = Callable[[list[Settlement], list[Settled]], None]


class Settler:
    """``on_settled`` hears of every committed batch, ``on_dropped`` of a settlement
    the database refused on its own; ``wake`` is called when the buffer empties.
    ``rate`` tells how many runs end per second now (the prefetch window's estimate)
    and ``active`` how many held jobs are still to end (running or buffered): what the
    gathering wait can expect to collect."""

    def __init__(self, store: Store, identity: Identity, db: DatabaseHealth,
                 on_settled: OnSettled, on_dropped: Callable[[Settlement], None],
                 wake: Callable[[], None], rate: Callable[[], float] = lambda: 0.0,
                 active: Callable[[], int] = lambda: MAX_BATCH,
                 writes: asyncio.Lock | None = None) -> None:
        self._store = store
        self._identity = identity
        self._db = db
        self._on_settled = on_settled
        self._on_dropped = on_dropped
        self._wake = wake
        self._rate = rate
        self._active = active
        self.writes = writes or asyncio.Lock()  # taken in turns with the lease renewals
        self._took = 0.0  # how long the last write took, seconds
        self._clock = time.monotonic  # both replaced by tests
        self._sleep = asyncio.sleep
        self._buffer: list[Settlement] = []
        self._pending = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self.written = 0  # settlements committed (or refused by their guard) so far

    def __len__(self) -> int:
        return len(self._buffer)

    def put(self, settlement: Settlement) -> None:
        self._buffer.append(settlement)
        self._empty.clear()
        self._pending.set()

    async def wait_empty(self) -> None:
        await self._empty.wait()

    async def flushed_after_outage(self) -> None:
        """After an outage, wait until what was buffered meanwhile is written: a claim or
        a reap must not go first (docs/concepts/failures.md)."""
        if self._db.flush_pending:
            await self._empty.wait()
            self._db.flush_pending = False

    def _settled(self, batch: list[Settlement], results: list[Settled]) -> None:
        self.written += len(batch)
        self._on_settled(batch, results)

    async def _settle_alone(self, batch: list[Settlement]) -> bool:
        """Each settlement of a refused batch on its own; one whose transaction lost a race
        (``DatabaseConflict``) is tried up to ``CONFLICT_ATTEMPTS`` times. One the database
        still refuses is dropped with an error log: its job keeps its claim until the lease
        expires and the reaper recovers it (journal ``stale-recovered``), so nothing is lost
        and the worker goes on. False if the database became unreachable (nothing is dropped)."""
        done: list[Settlement] = []
        results: list[Settled] = []
        handled: set[int] = set()  # settled or dropped, by identity
        try:
            for settlement in batch:
                for attempt in range(1, CONFLICT_ATTEMPTS + 1):
                    try:
                        results += await self._write([settlement])
                        done.append(settlement)
                        handled.add(id(settlement))
                        break
                    except DatabaseUnavailable:
                        raise
                    except DatabaseError as exc:
                        if isinstance(exc, DatabaseConflict) and attempt < CONFLICT_ATTEMPTS:
                            # Rolled back whole for losing a race (a cancel of a dependent
                            # and this settle, say): the same settlement again.
                            log.info("settle_conflict_retried", job_id=str(settlement.id),
                                     attempt=attempt, error=classify(exc))
                            continue
                        log.error("settle_failed", job_id=str(settlement.id),
                                  run_no=settlement.run_no, action=settlement.action.value,
                                  error=classify(exc),
                                  note="the job is recovered when its lease expires")
                        self._on_dropped(settlement)
                        handled.add(id(settlement))
                        break
        except DatabaseUnavailable:
            self._settled(done, results)
            self._buffer[: len(batch)] = [s for s in batch if id(s) not in handled]
            return False
        self._settled(done, results)
        return True

    async def _write(self, batch: list[Settlement]) -> list[Settled]:
        async with self.writes:
            return await self._store.settle_many(self._identity.claimed_by, batch)

    async def _write_batch(self, batch: list[Settlement]) -> list[Settled]:
        """The batch, sent again whole while it loses races (up to ``CONFLICT_ATTEMPTS``
        times): a deadlock or a serialization failure rolls it back whole, and the next
        try usually goes through. What it raises then is the last try's error."""
        for attempt in range(1, CONFLICT_ATTEMPTS):
            try:
                return await self._write(batch)
            except DatabaseConflict as exc:
                log.info("settle_batch_conflict_retried", count=len(batch), attempt=attempt,
                         error=classify(exc))
        return await self._write(batch)

    async def _gather(self) -> None:
        """Wait for more settlements before writing a small batch, when runs end fast
        enough that the wait would at least double it: as long as the last write took,
        at most ``GATHER_MAX``. The jobs waiting here no longer hold a slot (they are
        settling), so the slots go on meanwhile; what waits is their commit, and a
        ``result()`` caller's answer, by at most that long. A batch of slow jobs, or of
        the last runs of a drain, is written at once (too few ending to wait for): what
        can join it is at most the held jobs still to end, whatever the recent rate."""
        wait = min(self._took, GATHER_MAX)
        if wait > 0 and min(self._rate() * wait, self._active()) >= len(self._buffer):
            await self._sleep(wait)

    async def run(self) -> None:
        db = self._db
        while True:
            await self._pending.wait()
            self._pending.clear()
            while self._buffer:
                if len(self._buffer) < MAX_BATCH:
                    await self._gather()
                batch = self._buffer[:MAX_BATCH]
                sent = self._clock()
                try:
                    results = await self._write_batch(batch)
                    self._took = self._clock() - sent
                except DatabaseUnavailable:
                    await db.back_off("settler")
                    continue
                except DatabaseError as exc:
                    # Refused, not unreachable: something in the batch the database cannot
                    # take. Settle one by one so the others land; see _settle_alone.
                    db.recovered("settler")
                    log.error("settle_batch_refused", count=len(batch), error=classify(exc))
                    if await self._settle_alone(batch):
                        del self._buffer[: len(batch)]
                    else:  # the database went away meanwhile: what is left stays buffered
                        await db.back_off("settler")
                    continue
                db.recovered("settler")
                del self._buffer[: len(batch)]
                self._settled(batch, results)
            self._empty.set()
            self._wake()
