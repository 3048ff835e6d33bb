"""Optional retention (``--retention completed=1d,dead=7d``): delete finished jobs past
an age, in batches of at most ``BATCH`` rows, under a try-advisory-lock so that one
worker of the queue does it at a time (docs/operations/retention.md)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping

import anyio

from ..logs import get_logger
from ..store.base import CleanupCriteria, Status, Store
from .health import DatabaseHealth

log = get_logger("venturi.worker")

BATCH = 10_000


class Retention:
    def __init__(self, store: Store, rules: Mapping[str, dt.timedelta], db: DatabaseHealth,
                 interval: float) -> None:
        self._store = store
        self._rules = dict(rules)
        self._db = db
        self._interval = interval

    async def _delete(self, status: str, age: dt.timedelta) -> None:
        cutoff = await self._store.db_now() - age
        while True:
            n = await self._store.cleanup_exclusive(CleanupCriteria(
                cutoff, status=Status(status), batch_size=BATCH))
            if n:
                log.info("retention_deleted", status=status, count=n)
            if n is None or n < BATCH:  # None: another worker holds the lock
                return

    async def run(self) -> None:
        while True:
            for status, age in self._rules.items():
                await self._db.retry("retention", functools.partial(self._delete, status, age))
            await anyio.sleep(self._interval)
