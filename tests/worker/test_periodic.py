"""Periodic tasks with the worker in the loop (DESIGN §4 rule 12; docs/concepts/periodic.md):
one non-terminal occurrence per kind, the next one inserted by the settle that finishes
the last, ticks in UTC, missed ticks skipped."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import itertools
import os
import time
import uuid
from collections.abc import Iterator
from typing import ClassVar

import asyncpg
import pytest

import venturi
from venturi import ManualClock, Outcome, Queue, Status
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .spies import Call, record

pytestmark = pytest.mark.timeout(60)
UTC = dt.UTC


class EverySecond(venturi.Task, kind="wp.every", every=dt.timedelta(seconds=1)):
    async def run(self, ctx: venturi.Context) -> None:
        return None


async def test_three_workers_keep_one_periodic_occurrence_and_completion_schedules_the_next(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    store = pgq.store
    assert isinstance(store, PostgresStore)
    seeds = record(monkeypatch, store, "seed_periodic")
    workers = [venturi.Worker(pgq, tasks=[EverySecond], concurrency=1, name=f"p{i}")
               for i in range(3)]
    tasks = [asyncio.create_task(w.run()) for w in workers]  # all three boot at once
    try:
        await wait_for(lambda: len([c for c in seeds if c.ended]) == 3,
                       what="every worker to seed")
        assert sorted(c.result for c in seeds) == [0, 0, 1]  # one insert, two no-ops

        async def two_completed() -> bool:
            return await pgq.count(kind="wp.every", statuses=["completed"]) >= 2
        await wait_for(two_completed, timeout=10, what="two occurrences to complete")
    finally:
        # All three stop claiming at once: drained one after the other, a worker still
        # running could run an occurrence the first one released, and a completed row
        # would then carry a release (and a tick that is a release time).
        for w in workers:
            w.request_drain(grace=0)
        await asyncio.wait_for(asyncio.gather(*(w.drain() for w in workers)), 10)
        await asyncio.gather(*tasks)
    # The unique index admits no second waiting or running occurrence, whoever writes it.
    with pytest.raises(asyncpg.UniqueViolationError):
        await store.pool.execute(
            f"INSERT INTO {pgq.prefix}jobs (id, kind, payload, periodic)"
            " VALUES ($1, 'wp.every', '{}', true)", uuid.uuid4())
    rows = await store.pool.fetch(
        f"SELECT id, status, created_at, visible_at, finished_at FROM {pgq.prefix}jobs"
        " WHERE kind = 'wp.every' ORDER BY created_at, id")
    done = [r for r in rows if r["status"] == "completed"]
    assert len(done) >= 2 and [r["status"] for r in rows[len(done):]] == ["pending"]
    for previous, following in itertools.pairwise(rows):
        # Never none and never two: each occurrence is inserted by the transaction that
        # completes the one before (one now() for both), so their lives tile the time.
        assert following["created_at"] == previous["finished_at"]
        tick = following["visible_at"]
        entries = await pgq.journal(following["id"])
        if following["status"] == "pending" and entries:
            # Claimed (due, or prefetched once due) when the drain came, and handed back
            # unrun: a release makes it visible at the release, past its tick.
            (entry,) = entries
            assert entry.outcome is Outcome.RELEASED
            assert tick == entry.recorded_at > previous["finished_at"]
            continue
        assert tick.microsecond == 0  # every= ticks are aligned to the epoch
        # The next tick after the completion, missed ticks skipped.
        assert previous["finished_at"] < tick <= previous["finished_at"] + dt.timedelta(seconds=1)
    for r in done:
        (entry,) = await pgq.journal(r["id"])
        assert entry.outcome is Outcome.COMPLETED and entry.recorded_at == r["finished_at"]


class EveryThreeHours(venturi.Task, kind="wp.cron", cron="0 */3 * * *"):
    """Runs when the test says so, so that each run settles on a known database time."""

    gate: ClassVar[asyncio.Event]

    async def run(self, ctx: venturi.Context) -> str:
        await EveryThreeHours.gate.wait()
        return "ran"


@pytest.fixture
def local_time_is_new_york() -> Iterator[None]:
    """A process zone with an offset and a DST change: cron ticks evaluated in local time
    instead of UTC would land elsewhere."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


async def test_cron_ticks_in_utc_across_a_day_boundary_and_skips_missed_ticks(
        pg_store: PostgresStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
        local_time_is_new_york: None) -> None:
    """Under the injected clock: seeded at the first tick after boot (past midnight UTC),
    the next one after each completion, and after a long gap the next tick after now
    (New York switches to summer time at 07:00 UTC that day: UTC has no such jump)."""
    queue = Queue(pg_store)
    start = dt.datetime(2027, 3, 13, 23, 58, 30, tzinfo=UTC)
    clock.set(start)
    EveryThreeHours.gate = asyncio.Event()
    clock_reads = record(monkeypatch, pg_store, "db_now")
    worker = venturi.Worker(queue, tasks=[EveryThreeHours], concurrency=1, poll_interval=0.05,
                            heartbeat_interval=0.05)

    async def occurrences() -> list[asyncpg.Record]:
        return list(await pg_store.pool.fetch(
            f"SELECT id, status, created_at, visible_at, finished_at FROM {pg_store.prefix}jobs"
            " ORDER BY created_at, id"))

    async def run_at(now: dt.datetime) -> None:
        """Move the database clock to ``now`` and let the waiting occurrence run there."""
        EveryThreeHours.gate.clear()
        clock.set(now)
        # The worker estimates database time from its last clock reads: let two of them see
        # the new time before the run settles (its successor is computed from that estimate).
        after = len(clock_reads)

        def seen(calls: list[Call]) -> bool:
            return len([c for c in calls[after:] if c.ended is not None]) >= 2
        await wait_for(lambda: seen(clock_reads), what="the worker to read the new time")
        EveryThreeHours.gate.set()

        async def settled() -> bool:
            rows = await occurrences()
            return sum(r["status"] == "completed" for r in rows) == len(rows) - 1 > 0 \
                and rows[-1]["created_at"] == now
        await wait_for(settled, what=f"the occurrence to complete at {now:%H:%M}")

    runner = asyncio.create_task(worker.run())
    try:
        async def seeded() -> bool:
            return len(await occurrences()) == 1
        await wait_for(seeded, what="the first occurrence")
        (first,) = await occurrences()
        assert first["visible_at"] == dt.datetime(2027, 3, 14, 0, 0, tzinfo=UTC)

        await run_at(dt.datetime(2027, 3, 14, 0, 0, tzinfo=UTC))
        await run_at(dt.datetime(2027, 3, 14, 10, 0, tzinfo=UTC))  # 03:00 ran late
    finally:
        EveryThreeHours.gate.set()
        await asyncio.wait_for(worker.drain(grace=0), 10)
        await asyncio.wait_for(runner, 10)
    rows = await occurrences()
    seen = [(r["status"], r["visible_at"].strftime("%d %H:%M"), r["finished_at"]) for r in rows]
    assert seen == [
        ("completed", "14 00:00", dt.datetime(2027, 3, 14, 0, 0, tzinfo=UTC)),
        ("completed", "14 03:00", dt.datetime(2027, 3, 14, 10, 0, tzinfo=UTC)),
        ("pending", "14 12:00", None),  # not 06:00 or 09:00: missed ticks are skipped
    ]
    for r in rows[:2]:
        assert [(e.run_no, e.outcome) for e in await queue.journal(r["id"])] == [
            (1, Outcome.COMPLETED)]
    assert await queue.count(kind="wp.cron", statuses=[Status.PENDING, Status.CLAIMED]) == 1


async def test_a_run_ending_within_the_clock_lag_of_its_tick_gets_the_next_tick() -> None:
    """The worker's estimate of the database's time may lag it by a few milliseconds
    (DbClock). A run that ends sooner than that after its tick must still be followed by
    the next tick, not by its own tick again, which has passed: that successor would run
    at once, a second run for one tick (the three-worker test above caught one)."""
    from venturi.store.base import Action
    from venturi.store.memory import MemoryStore
    from venturi.testing.builders import add, claim_one, new_job
    from venturi.worker.clock import DbClock
    from venturi.worker.executor import Executor
    from venturi.worker.held import Held
    from venturi.worker.periodic import next_tick

    store = MemoryStore()
    await add(store, new_job(kind=EverySecond.kind))
    claimed = await claim_one(store, EverySecond.kind)
    tick = next_tick(EverySecond.__task__, dt.datetime.now(UTC))
    record = dataclasses.replace(claimed, visible_at=tick, periodic=True)
    clock = DbClock()
    # The estimate reads before the tick although the run, claimed at the tick, is over
    # (by 200 ms here, more than this test's own steps could take: it stays behind).
    clock.offset = (tick - dt.timedelta(milliseconds=200)
                    - dt.datetime.now(UTC)).total_seconds()
    executor = Executor({EverySecond.kind: EverySecond}, None, clock, lambda due: None)
    held = Held(record, dt.timedelta(seconds=30), asyncio.get_running_loop().time() + 30)
    settlement = await executor.execute(held)
    assert settlement is not None and settlement.action is Action.COMPLETE
    assert settlement.successor is not None
    assert settlement.successor[1] == tick + dt.timedelta(seconds=1)


async def test_the_clock_offset_is_read_at_the_middle_of_the_round_trip() -> None:
    """The database reads its clock during the round trip of ``SELECT now()``; taking the
    reply's arrival as that moment put the estimate half a round trip behind."""
    from venturi.worker.clock import DbClock

    class SlowStore:
        """The database's clock is this host's; the reply takes 200 ms each way."""

        async def db_now(self) -> dt.datetime:
            await asyncio.sleep(0.2)
            now = dt.datetime.now(UTC)
            await asyncio.sleep(0.2)
            return now

    clock = DbClock()
    await clock.sync(SlowStore())  # type: ignore[arg-type]
    assert abs(clock.offset) < 0.1  # was -0.2: the reply's half of the round trip
