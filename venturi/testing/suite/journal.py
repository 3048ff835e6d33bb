"""A claim settled once and journaled once; the failure budget (docs/concepts/lifecycle.md,
docs/concepts/failures.md)."""

from __future__ import annotations

import datetime as dt

from venturi import ManualClock, Outcome, Queue, Status
from venturi.store.base import Action, ClaimRequest, Settlement, Store
from venturi.testing.tasks import Embed

LEASE = {"conformance.embed": dt.timedelta(seconds=10)}


async def test_claim_complete_journals_once(queue: Queue, store: Store) -> None:
    job = await queue.enqueue(Embed(uri="file:///a"))
    (claimed,) = await store.claim(ClaimRequest("w/1", LEASE, 10))
    assert claimed.id == job.id
    assert (claimed.status, claimed.run_count, claimed.claimed_by) == (Status.CLAIMED, 1, "w/1")
    assert await store.settle("w/1", Settlement(job.id, 1, Action.COMPLETE, note="done"))
    row = await queue.job(job.id)
    assert row is not None and row.status is Status.COMPLETED and row.finished_at is not None
    entries = await queue.journal(job.id)
    assert [(e.run_no, e.outcome, e.note) for e in entries] == [(1, Outcome.COMPLETED, "done")]


async def test_failure_budget_retried_retried_dead(queue: Queue, store: Store,
                                                   clock: ManualClock) -> None:
    job = await queue.enqueue(Embed(uri="file:///b"))  # max_failures=3
    for expected in (Outcome.RETRIED, Outcome.RETRIED, Outcome.DEAD):
        (c,) = await store.claim(ClaimRequest("w/1", LEASE, 1))
        (res,) = await store.settle_many("w/1", [Settlement(
            c.id, c.run_count, Action.FAIL, note="ValueError", delay=dt.timedelta(seconds=1))])
        assert res.applied and res.outcome is expected
        clock.advance(2)
    row = await queue.job(job.id)
    assert row is not None and row.status is Status.DEAD and row.failure_count == 3
    assert [e.run_no for e in await queue.journal(job.id)] == [1, 2, 3]
