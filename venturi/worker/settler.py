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

from ..errors import DatabaseUnavailable
from ..store.base import Settled, Settlement

if TYPE_CHECKING:
    from .supervisor import Worker

MAX_BATCH = 1000


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
                worker.recovered_from_outage("settler")
                del self._buffer[: len(batch)]
                self._on_settled(batch, results)
            self._empty.set()
            worker.wake()
