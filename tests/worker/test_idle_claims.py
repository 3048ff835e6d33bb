"""An idle worker claims for a slot that frees only when its last claim filled up
(``HeldJobs.exhausted``): after a claim that found less than it asked for, nothing is
left to claim until something wakes the claimer (a notification, the timer, the settler
once a settlement commits, the poll). An idle pickup is then two claims, the
notification's and the settler's, not three; the third found nothing and, in flight when
the next job's notification came, made that pickup wait for it
(benchmarks/results-pickup.md, 2026-12-06)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

import venturi
from venturi import Queue, Status
from venturi.worker.held import HeldJobs
from venturi.worker.metrics import WorkerMetrics

from ..conftest import wait_for
from .conftest import running

pytestmark = pytest.mark.timeout(60)
NEVER = dt.timedelta(seconds=60)  # no poll (nor heartbeat) within a test
FIRST_POLL = 1.0  # the poller's first interval: it starts before LISTEN (worker/waker.py)


class Ping(venturi.Task, kind="wic.ping"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


def test_a_slot_that_frees_wakes_the_claimer_unless_the_last_claim_came_back_short() -> None:
    wake = asyncio.Event()
    held = HeldJobs(WorkerMetrics(), wake)
    held.activated(2)
    held._deactivate()
    assert wake.is_set()  # the last claim filled up: there may be more for this slot
    wake.clear()
    held.exhausted = True
    held._deactivate()
    assert not wake.is_set()


def _quiet(worker: venturi.Worker) -> bool:
    """Nothing held, nothing to settle, no claim in flight or wanted."""
    return (not len(worker._held) and not len(worker._settler)
            and not worker._claimer.claiming and not worker._claim_wanted.is_set())


async def test_an_idle_pickup_is_two_claims(pgq: Queue,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    claims: list[int] = []
    real = pgq.store.claim

    async def counted(*args: Any, **kwargs: Any) -> Any:
        found = await real(*args, **kwargs)
        claims.append(len(found))
        return found

    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=4,
                            heartbeat_interval=NEVER, poll_interval=NEVER)
    started = asyncio.get_running_loop().time()
    async with running(worker):
        # Past the poller's first look, and quiet: from here only this test's jobs wake it.
        await asyncio.sleep(max(started + FIRST_POLL + 0.2
                                - asyncio.get_running_loop().time(), 0.0))
        await wait_for(lambda: _quiet(worker), what="an idle worker")
        monkeypatch.setattr(pgq.store, "claim", counted)
        for _ in range(3):
            claims.clear()
            job = await pgq.enqueue(Ping())

            async def done(job_id: Any = job.id) -> bool:
                row = await pgq.job(job_id)
                return row is not None and row.status is Status.COMPLETED

            await wait_for(done, what="the job")
            await wait_for(lambda: _quiet(worker), what="the worker idle again")
            # The notification's claim took the job; the settler's, once the job's
            # settlement committed, found nothing. The freed slot claimed nothing.
            assert claims == [1, 0]
