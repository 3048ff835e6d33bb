"""The worker's row in ``{prefix}workers`` (``venturi workers``, ``Queue.workers()``),
written every ``heartbeat_interval``; each beat also measures the database's clock
again (``clock.py``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

import anyio

from ..store.base import Store, WorkerInfo
from .clock import DbClock
from .health import DatabaseHealth, Health
from .held import HeldJobs
from .identity import Identity


class Heartbeat:
    def __init__(self, store: Store, identity: Identity, kinds: Sequence[str], concurrency: int,
                 held: HeldJobs, health: Health, clock: DbClock, db: DatabaseHealth,
                 interval: float) -> None:
        self._store = store
        self._identity = identity
        self._kinds = sorted(kinds)
        self._concurrency = concurrency
        self._held = held
        self._health = health
        self._clock = clock
        self._db = db
        self._interval = interval
        # Database time (the boot measured the clock): this host's wall clock may be off.
        self._started = clock.now()

    async def _beat(self) -> None:
        identity = self._identity
        await self._store.heartbeat(WorkerInfo(
            name=identity.name, boot_id=identity.boot_id, host=socket.gethostname(),
            pid=os.getpid(), kinds=self._kinds, concurrency=self._concurrency,
            in_flight=len(self._held), started_at=self._started, last_seen=self._started,
            draining=self._health.draining,
        ))
        await self._clock.sync(self._store)

    async def run(self) -> None:
        while True:
            await self._db.retry("heartbeat", self._beat)
            await anyio.sleep(self._interval)
