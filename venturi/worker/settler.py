"""Writing settlements in batches, and keeping them through a database outage.

Finished runs queue their settlement here; one loop writes whatever has
accumulated in a single ``settle_many`` round trip. When the database is
unreachable the batch stays buffered (its jobs stay held, so their leases are
still renewed) and is written first after reconnecting (docs/concepts/failures.md,
"Losing the database is not a failure").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..errors import DatabaseConflict, DatabaseError, DatabaseUnavailable, classify
from ..logs import get_logger
from ..store.base import Settled, Settlement, Store
from .health import DatabaseHealth
from .identity import Identity

MAX_BATCH = 1000
# Attempts at one settlement that keeps losing races (deadlocks) before it is dropped.
CONFLICT_ATTEMPTS = 3
log = get_logger("venturi.worker")

OnSettled = Callable[[list[Settlement], list[Settled]], None]


class Settler:
    """``on_settled`` hears of every committed batch, ``on_dropped`` of a settlement
    the database refused on its own; ``wake`` is set when the buffer empties."""

    def __init__(self, store: Store, identity: Identity, db: DatabaseHealth,
                 on_settled: OnSettled, on_dropped: Callable[[Settlement], None],
                 wake: asyncio.Event) -> None:
        self._store = store
        self._identity = identity
        self._db = db
        self._on_settled = on_settled
        self._on_dropped = on_dropped
        self._wake = wake
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
                        results += await self._store.settle_many(
                            self._identity.claimed_by, [settlement])
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

    async def run(self) -> None:
        db = self._db
        while True:
            await self._pending.wait()
            self._pending.clear()
            while self._buffer:
                batch = self._buffer[:MAX_BATCH]
                try:
                    results = await self._store.settle_many(self._identity.claimed_by, batch)
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
            self._wake.set()
