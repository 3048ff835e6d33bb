"""When the worker runs what: the next-visible-at timer, anti-starvation shares and
periodic occurrences, with the worker in the loop (DESIGN §4 rules 3, 12; §6 timer)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any
from uuid import UUID

import pytest

import venturi
from venturi import Queue, Status
from venturi.store.base import ClaimRequest, JobRecord
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .conftest import running

pytestmark = pytest.mark.timeout(60)
STARTED: dict[UUID, dt.datetime] = {}


class Stamp(venturi.Task, kind="ws.stamp"):
    async def run(self, ctx: venturi.Context) -> None:
        STARTED[ctx.job_id] = dt.datetime.now(dt.UTC)


class Flood(venturi.Task, kind="ws.flood", priority=venturi.Priority.HIGH):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Routine(venturi.Task, kind="ws.routine", priority=venturi.Priority.NORMAL):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Chore(venturi.Task, kind="ws.chore", priority=venturi.Priority.LOW):
    async def run(self, ctx: venturi.Context) -> None:
        return None


async def test_timer_starts_delayed_jobs_when_they_become_visible(pgq: Queue) -> None:
    STARTED.clear()
    # A 60 s poll: only the timer can start these on time.
    worker = venturi.Worker(pgq, tasks=[Stamp], concurrency=2, poll_interval=60)
    early = await pgq.enqueue(Stamp(), delay=dt.timedelta(seconds=1.5))  # found at boot
    async with running(worker):
        late = await pgq.enqueue(Stamp(), delay=dt.timedelta(seconds=1))  # told by NOTIFY
        await wait_for(lambda: {early.id, late.id} <= STARTED.keys(), timeout=10,
                       what="both delayed jobs to start")
    for job in (early, late):
        row = await pgq.job(job.id)
        assert row is not None and row.status is Status.COMPLETED
        lag = (STARTED[job.id] - row.visible_at).total_seconds()
        assert 0 <= lag < 0.2, f"started {lag:.3f}s after it became visible"


async def test_low_tiers_get_their_share_under_a_high_priority_flood(pgq: Queue) -> None:
    await pgq.enqueue_many([Flood() for _ in range(150)])  # the oldest work is all tier 0
    await pgq.enqueue_many([Routine() for _ in range(30)] + [Chore() for _ in range(30)])
    store = pgq.store
    claimed: list[int] = []
    real_claim = store.claim

    async def recording_claim(request: ClaimRequest) -> list[JobRecord]:
        jobs = await real_claim(request)
        claimed.extend(j.priority for j in jobs)
        return jobs

    store.claim = recording_claim  # type: ignore[method-assign]
    try:
        worker = venturi.Worker(pgq, tasks=[Flood, Routine, Chore], concurrency=4)
        await asyncio.wait_for(worker.run(until_empty=True), 30)
    finally:
        del store.claim
    assert len(claimed) == 210
    first = claimed[:100]
    shares = {tier: first.count(tier) for tier in (0, 1, 2)}
    assert shares[0] >= 50 and shares[1] >= 10 and shares[2] >= 10, shares


async def test_workers_claim_only_their_kinds_and_never_the_same_job(pgq: Queue) -> None:
    """Rules 2, 4, 5 under concurrency: three workers, one of them serving a subset."""
    STARTED.clear()
    runs: list[UUID] = []
    stamps = await pgq.enqueue_many([Stamp() for _ in range(150)])
    floods = await pgq.enqueue_many([Flood() for _ in range(150)])
    real_run = Stamp.run

    async def counted(self: Stamp, ctx: venturi.Context) -> None:
        runs.append(ctx.job_id)
        await real_run(self, ctx)

    Stamp.run = counted  # type: ignore[method-assign]
    try:
        only_flood = venturi.Worker(pgq, tasks=[Stamp, Flood], kinds=["ws.flood"], concurrency=4)
        both = [venturi.Worker(pgq, tasks=[Stamp, Flood], concurrency=4) for _ in range(2)]
        async with running(only_flood):
            await wait_for(lambda: _all_done(pgq, floods), timeout=20, what="the floods")
            assert await pgq.count(kind="ws.stamp", statuses=["pending"]) == 150
            await asyncio.gather(*(w.run(until_empty=True) for w in both))
    finally:
        del Stamp.run
    assert sorted(runs) == sorted(stamps)  # each exactly once
    store = pgq.store
    assert isinstance(store, PostgresStore)
    summary = await store.pool.fetch(
        f"SELECT j.status, j.run_count, array_agg(e.run_no || ':' || e.outcome) AS entries"
        f" FROM {pgq.prefix}jobs AS j JOIN {pgq.prefix}journal AS e"
        " ON e.job_id = j.id GROUP BY j.id")
    assert len(summary) == 300
    assert {(r["status"], r["run_count"], tuple(r["entries"])) for r in summary} == {
        ("completed", 1, ("1:completed",))}


async def _all_done(queue: Queue, ids: list[UUID]) -> bool:
    return await queue.count(statuses=["completed"]) >= len(ids)


async def test_prefetch_sends_the_next_claim_while_buffered_jobs_still_wait(pgq: Queue) -> None:
    """With prefetch (a window no wider than the slots), a claim goes out once a window is
    free and jobs are still buffered, so its round trip overlaps their runs; with a wider
    window the slots do not yield to it; without prefetch, never ahead of the slots."""
    await pgq.enqueue_many([Routine() for _ in range(300)])
    store = pgq.store
    real_claim = store.claim

    async def measure(**options: Any) -> list[tuple[int, int]]:
        seen: list[tuple[int, int]] = []  # (rows asked for, jobs buffered at that moment)

        async def recording_claim(request: ClaimRequest) -> list[JobRecord]:
            buffered = sum(h.state == "buffered" for h in worker._held.values())
            seen.append((request.limit, buffered))
            return await real_claim(request)

        store.claim = recording_claim  # type: ignore[method-assign]
        try:
            worker = venturi.Worker(pgq, tasks=[Routine], **options)
            await asyncio.wait_for(worker.run(until_empty=True), 30)
        finally:
            del store.claim
        return seen

    ahead = await measure(concurrency=10, prefetch=10)
    overlapped = [limit for limit, buffered in ahead if buffered]
    assert len(overlapped) >= 5, ahead  # most claims went out ahead of an empty inbox
    assert min(overlapped) >= 10, ahead  # ... and each for at least a prefetch window

    await pgq.enqueue_many([Routine() for _ in range(100)])
    wide = await measure(concurrency=4, prefetch=20)  # a window wider than the slots:
    assert all(buffered <= 4 for _, buffered in wide), wide  # no yield for the claimer

    await pgq.enqueue_many([Routine() for _ in range(100)])
    plain = await measure(concurrency=4)
    assert all(limit <= 4 for limit, _ in plain), plain
