"""Leases, renewal and recovery: lease expiry and boot recovery (docs/concepts/leases.md)."""

from __future__ import annotations

import datetime as dt

from venturi import ManualClock, Outcome, Status
from venturi.store.base import Action, LeaseRenewal, Store
from venturi.testing.builders import add, claim_one, job, new_job, settlement

LEASE = dt.timedelta(seconds=10)


async def test_extend_leases_renews_only_claims_still_held(
    store: Store, clock: ManualClock
) -> None:
    await add(store, *[new_job() for _ in range(4)])
    held, other_epoch, other_owner, settled = [await claim_one(store) for _ in range(4)]
    assert await store.settle("w/1", settlement(settled, Action.COMPLETE))
    clock.advance(5)
    renewed = await store.extend_leases("w/1", [
        LeaseRenewal(held.id, held.run_count, dt.timedelta(seconds=30)),
        LeaseRenewal(other_epoch.id, other_epoch.run_count + 1, dt.timedelta(seconds=30)),
        LeaseRenewal(settled.id, settled.run_count, dt.timedelta(seconds=30)),
    ])
    assert renewed == {held.id}
    assert not await store.extend_lease("w/2", other_owner.id, other_owner.run_count, LEASE)
    assert (await job(store, held.id)).claim_expires_at == clock.now() + dt.timedelta(seconds=30)
    for untouched in (other_epoch, other_owner):
        assert (await job(store, untouched.id)).claim_expires_at == untouched.claim_expires_at
    assert (await job(store, settled.id)).claim_expires_at is None
    assert await store.extend_leases("w/1", []) == set()


async def test_find_stale_lists_only_expired_claims(store: Store, clock: ManualClock) -> None:
    await add(store, new_job(), new_job(), new_job())
    early = await claim_one(store)
    clock.advance(5)
    late = await claim_one(store)  # the third stays pending
    clock.advance(5)
    assert await store.find_stale() == []  # expiry == now is not yet expired
    clock.advance(0.001)
    assert [j.id for j in await store.find_stale()] == [early.id]
    clock.advance(5)
    assert [j.id for j in await store.find_stale()] == [early.id, late.id]
    assert [j.id for j in await store.find_stale(limit=1)] == [early.id]


async def test_recover_is_guarded_by_epoch_and_expiry(store: Store, clock: ManualClock) -> None:
    (j,) = await add(store, new_job(max_failures=5))
    claimed = await claim_one(store, by="w/1")
    assert await store.recover(j.id, claimed.run_count) is None  # lease still valid
    clock.advance(11)
    assert await store.recover(j.id, claimed.run_count + 1) is None  # another epoch
    recovered = await store.recover(j.id, claimed.run_count)
    assert recovered is not None
    assert (recovered.id, recovered.kind, recovered.run_no, recovered.status,
            recovered.claimed_by) == (j.id, "k", 1, Status.PENDING, "w/1")
    row = await job(store, j.id)
    assert (row.status, row.failure_count, row.claimed_by, row.claim_expires_at,
            row.visible_at) == (Status.PENDING, 1, None, None, clock.now())
    assert [(e.run_no, e.outcome, e.note) for e in await store.journal(j.id)] == [
        (1, Outcome.STALE_RECOVERED, "lease-expired")]
    assert await store.recover(j.id, claimed.run_count) is None  # already recovered


async def test_recover_stale_counts_a_failure_and_kills_when_exhausted(
    store: Store, clock: ManualClock
) -> None:
    (j,) = await add(store, new_job(max_failures=2))
    keep = await add(store, new_job("other"))
    fresh = await claim_one(store, "other")
    statuses = []
    for _ in range(2):
        await claim_one(store)
        clock.advance(11)
        fresh_renewed = await store.extend_lease("w/1", fresh.id, fresh.run_count, LEASE)
        assert fresh_renewed
        (rec,) = await store.recover_stale()
        assert rec.id == j.id
        statuses.append(rec.status)
    assert statuses == [Status.PENDING, Status.DEAD]
    row = await job(store, j.id)
    assert (row.status, row.failure_count, row.finished_at) == (Status.DEAD, 2, clock.now())
    assert [(e.run_no, e.outcome, e.note) for e in await store.journal(j.id)] == [
        (1, Outcome.STALE_RECOVERED, "lease-expired"), (2, Outcome.DEAD, "lease-expired")]
    assert (await job(store, keep[0].id)).status is Status.CLAIMED
    assert await store.recover_stale() == []


async def test_recover_boot_takes_back_only_earlier_boots_of_the_same_name(
    store: Store,
) -> None:
    await add(store, *[new_job(max_failures=5) for _ in range(5)])
    old_boot = await claim_one(store, by="w1/boot-a")
    other_old_boot = await claim_one(store, by="w1/boot-b")
    current = await claim_one(store, by="w1/boot-c")
    longer_name = await claim_one(store, by="w10/boot-a")  # "w1" is a prefix of "w10"
    nested = await claim_one(store, by="w1/x/boot-a")  # a different name ("w1/x")

    recovered = await store.recover_boot("w1", "w1/boot-c")
    assert {(r.id, r.claimed_by, r.status) for r in recovered} == {
        (old_boot.id, "w1/boot-a", Status.PENDING),
        (other_old_boot.id, "w1/boot-b", Status.PENDING),
    }
    for gone in (old_boot, other_old_boot):
        row = await job(store, gone.id)
        assert (row.status, row.failure_count) == (Status.PENDING, 1)
        assert [(e.outcome, e.note) for e in await store.journal(gone.id)] == [
            (Outcome.STALE_RECOVERED, "worker-restarted")]
    for kept in (current, longer_name, nested):
        assert (await job(store, kept.id)).claimed_by == kept.claimed_by
        assert await store.journal(kept.id) == []
    assert await store.recover_boot("w1", "w1/boot-c") == []


async def test_recover_boot_kills_when_the_budget_is_spent(store: Store) -> None:
    (j,) = await add(store, new_job(max_failures=1))
    await claim_one(store, by="w/old")
    (rec,) = await store.recover_boot("w", "w/new")
    assert rec.status is Status.DEAD
    assert [e.outcome for e in await store.journal(j.id)] == [Outcome.DEAD]
