"""When the worker runs what: the next-visible-at timer, anti-starvation shares, which
kinds each worker claims and the prefetch window, with the worker in the loop (DESIGN §4
rules 2, 3; §6 timer). Periodic occurrences are in test_periodic.py."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import ClassVar
from uuid import UUID

import pytest

import venturi
from venturi import Queue, Status
from venturi.store.base import JobRecord
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .conftest import running
from .spies import Call, record

pytestmark = pytest.mark.timeout(60)


class Stamp(venturi.Task, kind="ws.stamp"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


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
    """With a 60 s poll only the timer starts delayed work, each job when it becomes
    visible: each ran (the claim's own condition says not before it) and finished before
    the next one was visible. The first is told by NOTIFY, due before what the timer was
    set for, and visible only after the poll's one early round at boot; the others were
    there at boot."""
    worker = venturi.Worker(pgq, tasks=[Stamp], concurrency=2, poll_interval=60)
    second = await pgq.enqueue(Stamp(), delay=dt.timedelta(seconds=2.2))
    third = await pgq.enqueue(Stamp(), delay=dt.timedelta(seconds=3.3))
    async with running(worker):
        # Due 1.1 s before the second, however long the boot took: the gap it has to
        # run in does not shrink with a slow machine.
        due = await pgq.job(second.id)
        assert due is not None
        first = await pgq.enqueue(Stamp(), at=due.visible_at - dt.timedelta(seconds=1.1))

        async def all_done() -> bool:
            return await pgq.count(kind="ws.stamp", statuses=[Status.COMPLETED]) == 3
        await wait_for(all_done, timeout=20, what="the delayed jobs to run")
    for job, following in ((first, second), (second, third)):
        row, next_row = await pgq.job(job.id), await pgq.job(following.id)
        (entry,) = await pgq.journal(job.id)
        assert row is not None and next_row is not None
        assert row.visible_at <= entry.recorded_at < next_row.visible_at


def _tiers(claims: list[Call]) -> list[list[int]]:
    """The priorities of each claim batch, in claim order."""
    out = []
    for call in claims:
        jobs: list[JobRecord] = call.result
        out.append([j.priority for j in jobs])
    return out


@pytest.mark.parametrize("prefetch", [0, "auto"])
async def test_low_tiers_get_their_share_over_any_100_claims_under_a_flood(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch, prefetch: int | str) -> None:
    """Rule 3 over every stretch of 100 consecutive claims while all three tiers have
    runnable work, not just the first 100. A batch is claimed at once, so a stretch is
    whole batches (the first that reach 100 claims from where it starts). Claims for
    free slots only make many small batches; the adaptive window makes fewer, larger
    ones, split by the same rule."""
    total = {0: 300, 1: 40, 2: 40}
    await pgq.enqueue_many([Flood() for _ in range(total[0])])  # the oldest work: tier 0
    await pgq.enqueue_many([Routine() for _ in range(total[1])]
                           + [Chore() for _ in range(total[2])])
    claims = record(monkeypatch, pgq.store, "claim")
    worker = venturi.Worker(pgq, tasks=[Flood, Routine, Chore], concurrency=4,
                            prefetch=prefetch)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    batches = [b for b in _tiers(claims) if b]
    assert sum(map(len, batches)) == sum(total.values())
    # Batches claimed while every tier still had unclaimed work.
    left, contested = dict(total), 0
    for batch in batches:
        if min(left.values()) == 0:
            break
        contested += 1
        for tier in batch:
            left[tier] -= 1
    windows = 0
    for start in range(contested):
        window: list[int] = []
        for batch in batches[start:contested]:
            window += batch
            if len(window) >= 100:
                break
        if len(window) < 100:
            break
        windows += 1
        shares = {tier: window.count(tier) for tier in (0, 1, 2)}
        assert shares[0] >= len(window) / 2 and min(shares[1], shares[2]) >= len(window) // 10, (
            start, shares)
    # The flood lasts well past the first 100 claims.
    assert windows >= (50 if prefetch == 0 else 1), [len(b) for b in batches]


async def test_workers_claim_only_their_kinds_and_never_the_same_job(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules 2, 4, 5 under concurrency: three workers, one of them serving a subset."""
    runs: list[UUID] = []
    stamps = await pgq.enqueue_many([Stamp() for _ in range(150)])
    floods = await pgq.enqueue_many([Flood() for _ in range(150)])
    real_run = Stamp.run

    async def counted(self: Stamp, ctx: venturi.Context) -> None:
        runs.append(ctx.job_id)
        await real_run(self, ctx)

    monkeypatch.setattr(Stamp, "run", counted)
    only_flood = venturi.Worker(pgq, tasks=[Stamp, Flood], kinds=["ws.flood"], concurrency=4)
    both = [venturi.Worker(pgq, tasks=[Stamp, Flood], concurrency=4) for _ in range(2)]
    async with running(only_flood):
        await wait_for(lambda: _all_done(pgq, floods), timeout=20, what="the floods")
        assert await pgq.count(kind="ws.stamp", statuses=["pending"]) == 150
        await asyncio.gather(*(w.run(until_empty=True) for w in both))
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


class Gated(venturi.Task, kind="ws.gated", lease=dt.timedelta(seconds=30)):
    """Runs until the test opens its own gate."""

    started: ClassVar[list[UUID]]
    gates: ClassVar[dict[UUID, asyncio.Event]]

    async def run(self, ctx: venturi.Context) -> None:
        Gated.started.append(ctx.job_id)
        await Gated.gates.setdefault(ctx.job_id, asyncio.Event()).wait()


class Tally(venturi.Task, kind="ws.tally"):
    """Yields once, so that the slots and the claimer take turns (a run that never awaits
    lets one slot empty the whole inbox before the claimer runs again)."""

    started: ClassVar[int] = 0

    async def run(self, ctx: venturi.Context) -> None:
        Tally.started += 1
        await asyncio.sleep(0)


def _claimed(claims: list[Call]) -> int:
    return sum(len(c.result) for c in claims if c.ended is not None and c.error is None)


async def test_prefetch_sends_the_next_claim_while_a_buffered_job_still_waits(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two slots and a prefetch window of two: four jobs claimed, two running, two
    buffered. When both runs end, one slot takes a buffered job and the other takes the
    second; the slot that finds a whole window free yields to the claimer first, so the
    next claim (for a window) goes out while that buffered job has not started yet."""
    Gated.started, Gated.gates = [], {}
    await pgq.enqueue_many([Gated() for _ in range(10)])
    claims = record(monkeypatch, pgq.store, "claim",
                    observe=lambda: _claimed(claims) - len(Gated.started))
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=2, prefetch=2, poll_interval=60)
    async with running(worker):
        await wait_for(lambda: len(Gated.started) == 2 and _claimed(claims) == 4,
                       what="two runs and two buffered jobs")
        assert len(claims) == 1
        for id in Gated.started[:2]:  # both runs end in the same step
            Gated.gates.setdefault(id, asyncio.Event()).set()
        await wait_for(lambda: len(claims) >= 2, what="the next claim")
        ahead = claims[1]
        assert (ahead.args[0].limit, ahead.seen) == (2, 1), claims
        for gate in Gated.gates.values():
            gate.set()


async def test_no_claim_ahead_of_the_slots_without_a_narrow_prefetch_window(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window wider than the slots: the slots do not yield to the claimer, which only
    claims for a whole free window (or an empty inbox). Without prefetch, never more
    rows than free slots."""
    Tally.started = 0
    claims = record(monkeypatch, pgq.store, "claim",
                    observe=lambda: _claimed(claims) - Tally.started)

    await pgq.enqueue_many([Tally() for _ in range(100)])
    worker = venturi.Worker(pgq, tasks=[Tally], concurrency=4, prefetch=20)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    assert all(c.seen <= 4 for c in claims), [(c.args[0].limit, c.seen) for c in claims]

    claims.clear()
    Tally.started = 0
    await pgq.enqueue_many([Tally() for _ in range(100)])
    worker = venturi.Worker(pgq, tasks=[Tally], concurrency=4, prefetch=0)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    assert claims and all(c.args[0].limit <= 4 for c in claims)
    assert await pgq.count(kind="ws.tally", statuses=[Status.COMPLETED]) == 200
