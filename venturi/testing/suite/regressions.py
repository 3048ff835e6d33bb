"""Disagreements between the stores that venturi's model-based test found, pinned."""

from __future__ import annotations

import datetime as dt

from venturi import ManualClock, Outcome, Queue, Status
from venturi.store.base import Action, ClaimRequest, LeaseRenewal, Settlement, Store
from venturi.testing.tasks import Embed, Summarize, Urgent

LEASE = dt.timedelta(seconds=10)


async def test_repeated_settlement_in_one_batch_applies_once(queue: Queue, store: Store) -> None:
    """PostgreSQL's UPDATE touched the row once but reported every repeat as applied."""
    job = await queue.enqueue(Embed(uri="file:///dup"))
    (claimed,) = await store.claim(ClaimRequest("w/1", {"conformance.embed": LEASE}, 1))
    first = Settlement(job.id, claimed.run_count, Action.FAIL, note="ValueError")
    repeat = Settlement(job.id, claimed.run_count, Action.COMPLETE)
    results = await store.settle_many("w/1", [first, repeat, first])
    assert [r.applied for r in results] == [True, False, False]
    assert results[0].outcome is Outcome.RETRIED
    row = await queue.job(job.id)
    assert row is not None and row.status is Status.PENDING and row.failure_count == 1
    assert [e.outcome for e in await queue.journal(job.id)] == [Outcome.RETRIED]


async def test_stale_epoch_before_live_one_in_one_batch(queue: Queue, store: Store) -> None:
    job = await queue.enqueue(Embed(uri="file:///epochs"))
    (claimed,) = await store.claim(ClaimRequest("w/1", {"conformance.embed": LEASE}, 1))
    results = await store.settle_many("w/1", [
        Settlement(job.id, claimed.run_count + 1, Action.KILL),
        Settlement(job.id, claimed.run_count, Action.COMPLETE),
    ])
    assert [(r.applied, r.outcome) for r in results] == [(False, None),
                                                        (True, Outcome.COMPLETED)]


async def test_completions_of_two_epochs_in_one_batch(queue: Queue, store: Store) -> None:
    """The completion fast path keys its input by id: a second epoch of the same id
    must still be judged on its own, in either order, and repeats apply once."""
    job = await queue.enqueue(Embed(uri="file:///epochs-done"))
    (claimed,) = await store.claim(ClaimRequest("w/1", {"conformance.embed": LEASE}, 1))
    live, stale = claimed.run_count, claimed.run_count + 1
    results = await store.settle_many("w/1", [
        Settlement(job.id, stale, Action.COMPLETE, note="stale"),
        Settlement(job.id, live, Action.COMPLETE, note="live"),
        Settlement(job.id, live, Action.COMPLETE, note="repeat"),
    ])
    assert [(r.applied, r.outcome) for r in results] == [
        (False, None), (True, Outcome.COMPLETED), (False, None)]
    assert [(e.run_no, e.note) for e in await queue.journal(job.id)] == [(live, "live")]

    other = await queue.enqueue(Embed(uri="file:///epochs-done-2"))
    (claimed,) = await store.claim(ClaimRequest("w/1", {"conformance.embed": LEASE}, 1))
    results = await store.settle_many("w/1", [
        Settlement(other.id, claimed.run_count, Action.COMPLETE, note="live"),
        Settlement(other.id, claimed.run_count + 1, Action.COMPLETE, note="stale"),
    ])
    assert [(r.applied, r.outcome) for r in results] == [(True, Outcome.COMPLETED), (False, None)]


async def test_repeated_renewal_last_one_wins(queue: Queue, store: Store,
                                              clock: ManualClock) -> None:
    """PostgreSQL applied an arbitrary one of two renewals of the same claim."""
    job = await queue.enqueue(Embed(uri="file:///renew"))
    (claimed,) = await store.claim(ClaimRequest("w/1", {"conformance.embed": LEASE}, 1))
    held = await store.extend_leases("w/1", [
        LeaseRenewal(job.id, claimed.run_count, dt.timedelta(seconds=30)),
        LeaseRenewal(job.id, claimed.run_count, dt.timedelta(seconds=3)),
    ])
    assert held == {job.id}
    row = await queue.job(job.id)
    assert row is not None and row.claim_expires_at == clock.now() + dt.timedelta(seconds=3)


async def test_stale_sweep_breaks_expiry_ties_by_id(queue: Queue, store: Store,
                                                    clock: ManualClock) -> None:
    """Claims of one batch expire together; the reaper's limit must pick the same ones."""
    ids = await queue.enqueue_many([Embed(uri=f"file:///tie/{n}") for n in range(4)])
    assert len(await store.claim(ClaimRequest("w/1", {"conformance.embed": LEASE}, 4))) == 4
    clock.advance(LEASE + dt.timedelta(seconds=1))
    assert [j.id for j in await store.find_stale(2)] == sorted(ids)[:2]
    recovered = await store.recover_stale(2)
    assert sorted(r.id for r in recovered) == sorted(ids)[:2]


async def test_reservations_never_exceed_the_limit_across_kinds(queue: Queue, store: Store) -> None:
    """reserve_low + reserve_normal > limit claimed more jobs than asked for."""
    await queue.enqueue_many([Summarize(uri="file:///low"), Embed(uri="file:///normal"),
                              Urgent(n=1)])
    leases = {"conformance.summarize": LEASE, "conformance.embed": LEASE,
              "conformance.urgent": LEASE}
    claimed = await store.claim(ClaimRequest("w/1", leases, 1, reserve_normal=1, reserve_low=1))
    assert [j.kind for j in claimed] == ["conformance.summarize"]
    claimed = await store.claim(ClaimRequest("w/1", leases, 2, reserve_normal=2, reserve_low=0))
    assert sorted(j.kind for j in claimed) == ["conformance.embed", "conformance.urgent"]
