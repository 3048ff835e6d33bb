"""Claiming: runnable jobs in priority order under per-kind leases, and the reserved
slots of docs/concepts/priorities.md."""

from __future__ import annotations

import datetime as dt

from venturi import ManualClock, Status
from venturi.store.base import Action, ClaimRequest, KindChange, Store
from venturi.testing.builders import add, claim_one, new_job, request, settlement


async def test_claims_runnable_pending_of_requested_kinds_in_order(
    store: Store, clock: ManualClock
) -> None:
    now = clock.now()
    s = dt.timedelta(seconds=1)
    normal_old = new_job(priority=1, at=now - 5 * s)
    high_new = new_job(priority=0, at=now - s)
    high_old_a = new_job(priority=0, at=now - 3 * s)
    high_old_b = new_job(priority=0, at=now - 3 * s)  # same visible_at: id breaks the tie
    low_oldest = new_job(priority=2, at=now - 100 * s)
    future = new_job(priority=0, at=now + s)
    other_kind = new_job("other", priority=0, at=now - 100 * s)
    await add(store, future, low_oldest, normal_old, high_new, high_old_b, high_old_a,
              other_kind)

    order = [(await claim_one(store, "k")).id for _ in range(5)]
    assert order == [high_old_a.id, high_old_b.id, high_new.id, normal_old.id, low_oldest.id]
    assert await store.claim(request("k")) == []  # the future job is not runnable yet
    assert (await store.job(other_kind.id)).status is Status.PENDING  # type: ignore[union-attr]

    clock.advance(1)  # visible_at <= now is runnable
    assert (await claim_one(store, "k")).id == future.id


async def test_claim_sets_owner_epoch_and_per_kind_lease(store: Store, clock: ManualClock) -> None:
    a, b = await add(store, new_job("a"), new_job("b"))
    leases = {"a": dt.timedelta(seconds=7), "b": dt.timedelta(minutes=3)}
    claimed = {j.id: j for j in await store.claim(ClaimRequest("host:1/boot", leases, 10))}
    assert set(claimed) == {a.id, b.id}
    for job, lease in ((a, leases["a"]), (b, leases["b"])):
        row = claimed[job.id]
        assert row.status is Status.CLAIMED and row.claimed_by == "host:1/boot"
        assert row.run_count == 1
        assert row.claim_expires_at == clock.now() + lease
        assert await store.job(job.id) == row

    # Released and claimed again: the epoch moves on.
    assert await store.settle("host:1/boot", settlement(claimed[a.id], Action.RELEASE))
    again = await store.claim(ClaimRequest("other/boot", leases, 10))
    assert [(j.id, j.run_count, j.claimed_by) for j in again] == [(a.id, 2, "other/boot")]


async def test_claim_batches_up_to_limit(store: Store) -> None:
    jobs = await add(store, *[new_job() for _ in range(7)])
    first = await store.claim(request("k", limit=5))
    assert {j.id for j in first} == {j.id for j in jobs[:5]}
    rest = await store.claim(request("k", limit=5))
    assert {j.id for j in rest} == {j.id for j in jobs[5:]}
    assert await store.claim(request("k", limit=5)) == []
    assert await store.claim(request("k", limit=0)) == []


async def _tiers(store: Store, high: int, normal: int, low: int) -> dict[int, list[str]]:
    jobs = [new_job(priority=0) for _ in range(high)]
    jobs += [new_job(priority=1) for _ in range(normal)]
    jobs += [new_job(priority=2) for _ in range(low)]
    await add(store, *jobs)
    return {p: [str(j.id) for j in jobs if j.priority == p] for p in (0, 1, 2)}


def _by_tier(claimed: list) -> dict[int, list[str]]:  # type: ignore[type-arg]
    out: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for j in sorted(claimed, key=lambda j: j.id):
        out[j.priority].append(str(j.id))
    return out


async def test_reserved_slots_take_the_oldest_of_each_lower_tier(store: Store) -> None:
    ids = await _tiers(store, 10, 10, 10)
    got = _by_tier(await store.claim(request("k", limit=10, reserve_low=1, reserve_normal=1)))
    assert got == {0: ids[0][:8], 1: ids[1][:1], 2: ids[2][:1]}


async def test_reserved_slot_without_work_falls_through_to_priority_order(store: Store) -> None:
    ids = await _tiers(store, 10, 10, 0)
    got = _by_tier(await store.claim(request("k", limit=10, reserve_low=1, reserve_normal=1)))
    assert got == {0: ids[0][:9], 1: ids[1][:1], 2: []}


async def test_reserved_slots_fill_from_lower_tiers_when_high_is_empty(store: Store) -> None:
    ids = await _tiers(store, 0, 10, 10)
    got = _by_tier(await store.claim(request("k", limit=5, reserve_low=2, reserve_normal=1)))
    assert got == {0: [], 1: ids[1][:3], 2: ids[2][:2]}


async def test_reservations_never_exceed_the_limit(store: Store) -> None:
    await _tiers(store, 3, 3, 3)
    claimed = await store.claim(request("k", limit=1, reserve_low=1, reserve_normal=1))
    assert [j.priority for j in claimed] == [2]
    claimed = await store.claim(request("k", limit=2, reserve_low=5, reserve_normal=5))
    assert sorted(j.priority for j in claimed) == [2, 2]


async def test_next_visible_at_is_the_soonest_future_job_of_the_kinds(
    store: Store, clock: ManualClock
) -> None:
    now = clock.now()
    await add(store, new_job("a", at=now - dt.timedelta(seconds=5)),
              new_job("a", priority=2, at=now + dt.timedelta(seconds=30)),
              new_job("a", priority=0, at=now + dt.timedelta(seconds=60)),
              new_job("b", at=now + dt.timedelta(seconds=10)))
    assert await store.next_visible_at(["a"]) == now + dt.timedelta(seconds=30)
    assert await store.next_visible_at(["a", "b"]) == now + dt.timedelta(seconds=10)
    assert await store.next_visible_at(["c"]) is None


async def test_prepare_claims_claims_nothing(store: Store, clock: ManualClock) -> None:
    """A booting worker prepares its claims before it holds its name (Store.prepare_claims):
    nothing may be claimed by it, and a claim after it works as ever."""
    job = (await add(store, new_job("k")))[0]
    leases = {"k": dt.timedelta(seconds=30), "other": dt.timedelta(seconds=5)}
    await store.prepare_claims(ClaimRequest("host:1/boot", leases, 0))
    await store.prepare_claims(ClaimRequest("host:1/boot", leases, 10))  # whatever the limit
    row = await store.job(job.id)
    assert row is not None and (row.status, row.run_count, row.claimed_by) == (
        Status.PENDING, 0, None)
    assert await store.journal(job.id) == []
    assert [j.id for j in await store.claim(ClaimRequest("host:1/boot", leases, 10))] == [job.id]


async def test_runnable_left_is_a_pending_visible_job_of_a_kind_not_paused(
    store: Store, clock: ManualClock
) -> None:
    """What a drain to empty asks after an empty claim (Store.runnable_left): a
    runnable job of the kinds, limited ones included, not one due later, claimed, of
    another kind, or of a paused kind."""
    now = clock.now()
    await add(store, new_job("later", at=now + dt.timedelta(seconds=5)),
              new_job("held"), new_job("paused"), new_job("limited"))
    await claim_one(store, "held")
    await store.control_kind(KindChange("paused", paused=True))
    await store.control_kind(KindChange("limited", set_concurrency=True, concurrency=2))
    assert not await store.runnable_left(["later", "held", "paused", "none"])
    assert not await store.runnable_left([])
    assert await store.runnable_left(["limited"])
    for tier in (0, 1, 2):
        job = (await add(store, new_job("now", priority=tier)))[0]
        assert await store.runnable_left(["later", "now"])
        assert not await store.runnable_left(["later"])
        await store.cancel(ids=[job.id])
    assert not await store.runnable_left(["now"])
    clock.advance(5)
    assert await store.runnable_left(["later"])
