"""Writing settlements in batches, and keeping them through a database outage.

Finished runs queue their settlement here; one loop writes whatever has
accumulated in a single ``settle_many`` round trip. When the database is
unreachable the batch stays buffered (its jobs stay in the renewal set) and is
written first after reconnecting (DESIGN rule 15).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import DatabaseError, DatabaseUnavailable
from ..logs import get_logger
from ..store.base import Settled, Settlement
from .executor import classify

if TYPE_CHECKING:
    from .supervisor import Worker

MAX_BATCH = 1000
log = get_logger("venturi.worker")


class Settler:
    def __init__(self, worker: Worker,
                 on_settled: Callable[[list[Settlement], list[Settled]], None]) -> None:
        self._worker = worker
        self._on_settled = on_settled
        self._buffer: list[Settlement] = []
        self._pending = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._buffer)

    def put(self, settlement: Settlement) -> None:
        self._buffer.append(settlement)
        self._empty.clear()
        self._pending.set()

    async def _settle_alone(self, batch: list[Settlement]) -> bool:
        """Each settlement of a refused batch on its own. One the database still refuses
        is dropped with an error log: its job keeps its claim until the lease expires and
        the reaper recovers it (journal ``stale-recovered``), so nothing is lost and the
        worker goes on. False if the database became unreachable (nothing is dropped)."""
        worker = self._worker
        done: list[Settlement] = []
        results: list[Settled] = []
        handled: set[int] = set()  # settled or dropped, by identity
        try:
            for settlement in batch:
                try:
                    results += await worker.store.settle_many(worker.claimed_by, [settlement])
                    done.append(settlement)
                    handled.add(id(settlement))
                except DatabaseUnavailable:
                    raise
                except DatabaseError as exc:
                    log.error("settle_failed", job_id=str(settlement.id), run_no=settlement.run_no,
                              action=settlement.action.value, error=classify(exc),
                              note="the job is recovered when its lease expires")
                    worker.settle_dropped(settlement)
                    handled.add(id(settlement))
        except DatabaseUnavailable:
            self._on_settled(done, results)
            self._buffer[: len(batch)] = [s for s in batch if id(s) not in handled]
            return False
        self._on_settled(done, results)
        return True

    async def wait_empty(self) -> None:
        await self._empty.wait()

    async def run(self) -> None:
        worker = self._worker
        while True:
            await self._pending.wait()
            self._pending.clear()
            while self._buffer:
                batch = self._buffer[:MAX_BATCH]
                try:
                    results = await worker.store.settle_many(worker.claimed_by, batch)
                except DatabaseUnavailable:
                    await worker.outage("settler")
                    continue
                except DatabaseError as exc:
                    # Refused, not unreachable: something in the batch the database cannot
                    # take. Settle one by one so the others land; see _settle_alone.
                    worker.recovered_from_outage("settler")
                    log.error("settle_batch_refused", count=len(batch), error=classify(exc))
                    if await self._settle_alone(batch):
                        del self._buffer[: len(batch)]
                    else:  # the database went away meanwhile: what is left stays buffered
                        await worker.outage("settler")
                    continue
                worker.recovered_from_outage("settler")
                del self._buffer[: len(batch)]
                self._on_settled(batch, results)
            self._empty.set()
            worker.wake()
