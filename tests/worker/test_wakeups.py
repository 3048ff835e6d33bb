"""When an idle worker claims (docs/concepts/leases.md, "When a worker claims"): on a
wake-up that says work may exist, and on a freed slot only while work was left waiting
for room. Real PostgreSQL, the claims counted by a spy on the store; the fallback poll is
set an hour away, so nothing here is found by polling."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import asyncpg
import pytest

import venturi
import venturi.worker.waker as waker_module
from venturi import Queue, Status
from venturi.worker.health import Health
from venturi.worker.waker import Poller

from ..conftest import wait_for
from .conftest import running
from .spies import record

pytestmark = pytest.mark.timeout(60)
NO_POLL: dict[str, Any] = {"poll_interval": dt.timedelta(hours=1)}


class Tick(venturi.Task, kind="wku.tick"):
    n: int

    async def run(self, ctx: venturi.Context) -> None:
        pass


async def _completed(queue: Queue, job: Any) -> bool:
    row = await queue.job(getattr(job, "id", job))
    return row is not None and row.status is Status.COMPLETED


async def test_a_trickle_of_jobs_costs_one_claim_each(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs arriving one at a time, each after the last completed, into an idle worker
    with free slots: the notification's claim takes the job and comes back short; the
    freed slot and the settler's emptied buffer claim nothing more (they made two empty
    claims per job). Nor does a short claim ask when the next delayed job is due: every
    statement that makes work due later announces its time (it did, once per job)."""
    worker = venturi.Worker(pgq, tasks=[Tick], concurrency=4, **NO_POLL)
    claims = record(monkeypatch, pgq.store, "claim")
    lookups = record(monkeypatch, pgq.store, "next_visible_at")
    async with running(worker):
        # Once it listens, the waker asks for a claim (for what was notified before): let
        # it be made, and count from there.
        await wait_for(lambda: worker.health.listening, what="LISTEN")
        await wait_for(lambda: not worker._claim_wanted.is_set() and not worker._claimer.claiming,
                       what="the claims asked for at boot to be made")
        before, looked = len(claims), len(lookups)
        for n in range(20):
            job = await pgq.enqueue(Tick(n=n))
            await wait_for(lambda job=job: _completed(pgq, job), what=f"job {n} to complete")
            await wait_for(lambda: worker.held == 0, what="its settlement to be written")
        got = [len(c.result) for c in claims[before:]]
        assert got == [1] * 20, got
        assert len(lookups) == looked, lookups[looked:]


async def test_a_freed_slot_claims_what_a_full_claim_left_behind(pgq: Queue) -> None:
    """Work waiting when the worker's claims came back full is claimed as slots free up,
    with no wake-up but the freed slots: one slot, no prefetch, eight jobs enqueued
    before the worker started (their notifications were sent to nobody)."""
    jobs = await pgq.enqueue_many([Tick(n=n) for n in range(8)])
    worker = venturi.Worker(pgq, tasks=[Tick], concurrency=1, prefetch=0, **NO_POLL)
    async with running(worker, ready=False):
        for job in jobs:
            await wait_for(lambda job=job: _completed(pgq, job), what="every job to complete")


async def test_a_wake_up_while_every_slot_is_busy_is_claimed_when_one_frees(
        pgq: Queue) -> None:
    """A notification that comes while the only slot runs a job claims nothing then; the
    slot freeing claims it (the worker's last claim, of the running job, was full)."""
    release = asyncio.Event()

    class Hold(venturi.Task, kind="wku.hold"):
        async def run(self, ctx: venturi.Context) -> None:
            await release.wait()

    worker = venturi.Worker(pgq, tasks=[Hold, Tick], concurrency=1, prefetch=0,
                            **NO_POLL)
    async with running(worker):
        await wait_for(lambda: worker.health.listening, what="LISTEN")
        await pgq.enqueue(Hold())
        await wait_for(lambda: worker.held == 1, what="the holding job to run")
        waiting = await pgq.enqueue(Tick(n=1))
        release.set()
        await wait_for(lambda: _completed(pgq, waiting), what="the waiting job to complete")


async def test_a_periodic_task_s_next_tick_runs_with_no_poll(pgq: Queue) -> None:
    """A periodic occurrence's settle inserts the next tick, due a second later, and
    announces it: the claim after the run finds nothing, and the worker that settled it
    arms its timer from its own notification (the poll is an hour away, the reseed
    too)."""
    ran: list[int] = []

    class EverySecond(venturi.Task, kind="wku.every", every=dt.timedelta(seconds=1)):
        async def run(self, ctx: venturi.Context) -> None:
            ran.append(ctx.run_no)

    worker = venturi.Worker(pgq, tasks=[EverySecond], concurrency=2,
                            periodic_reseed_interval=dt.timedelta(hours=1), **NO_POLL)
    async with running(worker):
        await wait_for(lambda: len(ran) >= 3, timeout=10, what="three ticks to run")


async def test_a_tick_wakes_a_worker_that_did_not_run_the_occurrence(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settle that ends an occurrence announces the next tick to every worker of the
    kind: worker b, idle since before the occurrence settled (it found it claimed by a),
    runs the next tick with its poll and its reseed an hour away, while a, which ran the
    occurrence, stops claiming before settling it."""
    ran: list[str] = []
    started, go = asyncio.Event(), asyncio.Event()
    workers: dict[str, venturi.Worker] = {}

    class Gated(venturi.Task, kind="wku.gated", every=dt.timedelta(seconds=1)):
        async def run(self, ctx: venturi.Context) -> None:
            ran.append(str(ctx.job_id))
            if len(ran) == 1:  # a's run: held until b is up, then a drains
                started.set()
                await go.wait()
                workers["a"].request_drain()  # no claim from a after this: the tick is b's

    options: dict[str, Any] = {"concurrency": 1, "periodic_reseed_interval": dt.timedelta(hours=1),
                               **NO_POLL}
    a = workers["a"] = venturi.Worker(pgq, tasks=[Gated], name="wku-a", **options)
    b = venturi.Worker(pgq, tasks=[Gated], name="wku-b", **options)
    async with running(a):
        await asyncio.wait_for(started.wait(), 10)
        async with running(b):
            await wait_for(lambda: b.health.listening, what="b's LISTEN")
            await wait_for(lambda: not b._claim_wanted.is_set() and not b._claimer.claiming,
                           what="b's claims to find the occurrence taken")
            assert b.progress.completed == 0 and b.held == 0
            go.set()
            await wait_for(lambda: a.progress.completed == 1, what="a to settle its run")
            await wait_for(lambda: b.progress.completed >= 1, timeout=10,
                           what="b to run the next tick")
    assert a.progress.completed == 1 and len(set(ran)) == len(ran) >= 2


async def test_the_first_poll_waits_its_interval_once_listen_is_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While LISTEN is down the poll comes every second at most; when LISTEN comes up
    during such a wait (the boot's first one, a reconnection), the waker has just looked
    for work, so that wait ends without a poll and the next lasts the whole interval. A
    worker with an hour's poll interval polled a second after every boot."""
    health = Health()
    claim_wanted, waits = asyncio.Event(), []

    async def sleep(seconds: float) -> None:
        waits.append((seconds, claim_wanted.is_set()))
        if len(waits) == 1:
            health.listening = True  # LISTEN came up during the first wait
        elif len(waits) == 3:
            raise asyncio.CancelledError

    monkeypatch.setattr(waker_module.anyio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        await Poller(3600.0, health, claim_wanted).run()
    # The short wait, then the whole interval with no poll between them; then a poll.
    assert waits == [(1.0, False), (3600.0, False), (3600.0, True)]


class Parent(venturi.Task, kind="wku.parent"):
    async def run(self, ctx: venturi.Context) -> None:
        pass


class Child(venturi.Task, kind="wku.child"):
    async def run(self, ctx: venturi.Context) -> None:
        pass


async def test_a_pending_job_locked_by_a_new_dependent_s_enqueue_is_announced_again(
        pgq: Queue, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Enqueuing a job after a pending one locks that one's row (enqueue.sql,
    insert_waiting). A claim meanwhile skips the row and comes back empty: the enqueue's
    commit must wake the worker again, or the job waits for the poll (here an hour)."""
    await pgq.pause("wku.parent")
    parent = await pgq.enqueue(Parent())
    worker = venturi.Worker(pgq, tasks=[Parent, Child], concurrency=2, **NO_POLL)
    claims = record(monkeypatch, pgq.store, "claim")
    async with running(worker):
        await wait_for(lambda: worker.health.listening, what="LISTEN")
        holder = await asyncpg.connect(pg_dsn)
        try:
            async with holder.transaction():
                child = await pgq.enqueue(Child(), after=[parent.id], conn=holder)
                before = len(claims)
                await pgq.resume("wku.parent")  # a wake-up: its claim skips the locked row

                def skipped() -> bool:
                    return any("wku.parent" in c.args[0].leases and c.ended is not None
                               for c in claims[before:])
                await wait_for(skipped, what="a claim of the parent's kind")
                assert all(c.result == [] for c in claims[before:] if c.ended is not None)
        finally:
            await holder.close()
        await wait_for(lambda: _completed(pgq, parent), what="the parent to run")
        await wait_for(lambda: _completed(pgq, child), what="the child to run")
