"""Periodic tasks (``every=`` or ``cron=``; docs/concepts/periodic.md): when the next
occurrence is due, and the seeding that keeps one occurrence in the table.

At most one occurrence of a periodic kind is pending or claimed, enforced by a unique
index; every worker serving the kind inserts the next one at boot and every
``periodic_reseed_interval`` with ``ON CONFLICT DO NOTHING``, a no-op while one
exists. The settle that completes or kills an occurrence inserts the next one itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

import anyio

from .. import tracing
from .._ids import uuid7
from ..store.base import NewJob, Store
from ..task import Task, TaskOptions
from .health import DatabaseHealth

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def next_tick(options: TaskOptions, now: dt.datetime) -> dt.datetime:
    """The first tick strictly after ``now`` (UTC); missed ticks are skipped."""
    now = now.astimezone(dt.UTC)
    if options.every is not None:
        period = options.every
        elapsed = now - _EPOCH
        ticks = elapsed // period + 1
        return _EPOCH + ticks * period
    if options.cron is not None:
        from croniter import croniter

        result: dt.datetime = croniter(options.cron, now).get_next(dt.datetime)
        return result.astimezone(dt.UTC)
    raise ValueError(f"task {options.kind!r} is not periodic")


class PeriodicSeeder:
    """Seeds the periodic kinds among ``tasks``; ``seeded`` is called when a seed
    inserted an occurrence (the visibility timer then looks again)."""

    def __init__(self, store: Store, tasks: Sequence[type[Task]], db: DatabaseHealth,
                 interval: float, seeded: Callable[[], None]) -> None:
        self._store = store
        self._periodic = [cls for cls in tasks if cls.__task__.periodic]
        self._db = db
        self._interval = interval
        self._seeded = seeded

    async def _seed(self) -> int:
        tracer = tracing.tracer()
        if tracer is None:
            return await self._insert_seeds(None)
        # One span per seed, even one that finds every occurrence in place: its context
        # is stored before the insert tells which rows it took (the count says).
        with tracing.send(tracer, {c.__task__.kind for c in self._periodic}) as send:
            n = await self._insert_seeds(send.context)
            send.span.set_attribute(tracing.BATCH_COUNT, n)
        return n

    async def _insert_seeds(self, trace_context: str | None) -> int:
        now = await self._store.db_now()
        jobs = []
        for cls in self._periodic:
            o = cls.__task__
            jobs.append(NewJob(id=uuid7(), kind=o.kind, payload=cls().to_json(),
                               priority=int(o.priority), max_failures=o.max_failures,
                               at=next_tick(o, now), periodic=True, trace_context=trace_context))
        return await self._store.seed_periodic(jobs)

    async def run(self) -> None:
        if not self._periodic:
            return
        while True:
            if await self._db.retry("periodic", self._seed):
                self._seeded()
            await anyio.sleep(self._interval)
