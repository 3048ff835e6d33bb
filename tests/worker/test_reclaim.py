"""A job this worker claims again before it has recorded the settlement of its previous
run (a pause with ``resume_in=0``, claimed on another connection while the settler's
round trip still returns) keeps its new claim: the late record of the old run lets go
of the old run only. Otherwise the new run is dropped unrun, its job stays claimed
until its lease expires, and a drain exits with it claimed."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

import venturi
from venturi import Outcome, Queue, Status
from venturi.store.base import ClaimRequest, JobRecord, Settled, Settlement

pytestmark = pytest.mark.timeout(60)


class Twice(venturi.Task, kind="w.twice", lease=dt.timedelta(seconds=30)):
    """Pauses once, runnable again at once, then completes."""

    async def run(self, ctx: venturi.Context) -> str | venturi.Pause:
        if ctx.run_no == 1:
            return venturi.Pause(dt.timedelta(0))
        return "done"


async def test_a_late_settle_record_does_not_drop_the_next_claim(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    job = await pgq.enqueue(Twice())
    store: Any = pgq.store
    real_claim, real_settle = store.claim, store.settle_many
    reclaimed = asyncio.Event()

    async def claim(request: ClaimRequest) -> list[JobRecord]:
        jobs = await real_claim(request)
        if any(j.id == job.id and j.run_count == 2 for j in jobs):
            reclaimed.set()
        return jobs

    async def settle_many(claimed_by: str, batch: list[Settlement]) -> list[Settled]:
        results = await real_settle(claimed_by, batch)
        if any(s.id == job.id and s.run_no == 1 for s in batch):
            # Committed: the job is pending again. Hand the result back to the worker
            # only once its next claim has taken the job (the order the race produces;
            # the test's timeout bounds the wait). A plain wait: the settler resumes
            # before the slot that the claim hands the job to.
            await reclaimed.wait()
        return results

    monkeypatch.setattr(store, "claim", claim)
    monkeypatch.setattr(store, "settle_many", settle_many)
    worker = venturi.Worker(pgq, tasks=[Twice], concurrency=2, poll_interval=0.05)
    await asyncio.wait_for(worker.run(until_empty=True), 30)

    row = await pgq.job(job.id)
    assert row is not None and (row.status, row.run_count, row.claimed_by) == (
        Status.COMPLETED, 2, None)
    assert [e.outcome for e in await pgq.journal(job.id)] == [
        Outcome.PAUSED, Outcome.COMPLETED]
    assert worker.held == 0
