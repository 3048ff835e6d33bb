"""Guarded settlement, the journal, the failure budget, carry and periodic successors
(docs/concepts/lifecycle.md, failures.md, pause-and-carry.md, periodic.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from venturi import ManualClock, Outcome, Status
from venturi._ids import uuid7
from venturi.store.base import Action, HistoryFilter, NewJob, Settlement, Store
from venturi.testing.builders import add, claim_one, job, new_job, request, settlement


async def _outcomes(store: Store, id: object) -> list[tuple[int, Outcome]]:
    return [(e.run_no, e.outcome) for e in await store.journal(id)]  # type: ignore[arg-type]


async def test_settle_with_a_stale_run_no_is_refused_without_journal(
    store: Store, clock: ManualClock
) -> None:
    (j,) = await add(store, new_job())
    first = await claim_one(store, by="w/1")
    clock.advance(11)  # lease lost, then reclaimed by the same worker identity
    assert [r.id for r in await store.recover_stale()] == [j.id]
    second = await claim_one(store, by="w/1")
    assert second.run_count == 2

    assert not await store.settle("w/1", settlement(first, Action.COMPLETE))
    row = await job(store, j.id)
    assert (row.status, row.claimed_by, row.run_count) == (Status.CLAIMED, "w/1", 2)
    assert await _outcomes(store, j.id) == [(1, Outcome.STALE_RECOVERED)]

    assert await store.settle("w/1", settlement(second, Action.COMPLETE))
    assert await _outcomes(store, j.id) == [(1, Outcome.STALE_RECOVERED), (2, Outcome.COMPLETED)]


async def test_settle_by_another_worker_or_twice_is_refused(store: Store) -> None:
    (j,) = await add(store, new_job())
    claimed = await claim_one(store, by="w/1")
    assert not await store.settle("w/2", settlement(claimed, Action.COMPLETE))
    assert await store.journal(j.id) == []
    assert (await job(store, j.id)).status is Status.CLAIMED

    assert await store.settle("w/1", settlement(claimed, Action.COMPLETE))
    for action in Action:  # already settled: nothing applies, nothing is journaled
        assert not await store.settle("w/1", settlement(claimed, action))
    assert await _outcomes(store, j.id) == [(1, Outcome.COMPLETED)]
    assert (await job(store, j.id)).status is Status.COMPLETED


async def test_settle_of_a_pending_job_is_refused(store: Store) -> None:
    (j,) = await add(store, new_job())
    assert not await store.settle("w/1", Settlement(j.id, 0, Action.COMPLETE))
    assert not await store.settle("w/1", Settlement(j.id, 1, Action.COMPLETE))
    assert not await store.settle("w/1", Settlement(uuid7(), 1, Action.COMPLETE))
    assert await store.journal(j.id) == []


async def test_settle_many_mixes_applied_and_refused(store: Store) -> None:
    await add(store, *[new_job(max_failures=5) for _ in range(4)])
    a, b, c, d = sorted(await store.claim(request("k")), key=lambda r: r.id)
    results = await store.settle_many("w/1", [
        settlement(a, Action.COMPLETE, note="ok", attachment='{"chunks": 12}'),
        Settlement(b.id, b.run_count + 1, Action.COMPLETE),  # wrong epoch
        settlement(c, Action.FAIL, note="ValueError"),
        settlement(d, Action.PAUSE),
    ])
    assert [(r.id, r.applied, r.status, r.outcome) for r in results] == [
        (a.id, True, Status.COMPLETED, Outcome.COMPLETED),
        (b.id, False, None, None),
        (c.id, True, Status.PENDING, Outcome.RETRIED),
        (d.id, True, Status.PENDING, Outcome.PAUSED),
    ]
    (entry,) = await store.journal(a.id)
    assert (entry.run_no, entry.note, entry.attachment, entry.job_id, entry.kind) == (
        1, "ok", {"chunks": 12}, a.id, "k")
    assert await store.journal(b.id) == []
    assert (await job(store, b.id)).status is Status.CLAIMED
    assert [(e.outcome, e.note) for e in await store.journal(c.id)] == [
        (Outcome.RETRIED, "ValueError")]
    assert await _outcomes(store, d.id) == [(1, Outcome.PAUSED)]
    assert await store.settle_many("w/1", []) == []


async def test_fail_retries_until_the_budget_then_dies(store: Store, clock: ManualClock) -> None:
    (j,) = await add(store, new_job(max_failures=3))
    for n, expected in enumerate((Outcome.RETRIED, Outcome.RETRIED, Outcome.DEAD), start=1):
        claimed = await claim_one(store)
        (res,) = await store.settle_many("w/1", [settlement(claimed, Action.FAIL, note="boom")])
        assert (res.applied, res.outcome) == (True, expected)
        row = await job(store, j.id)
        assert row.failure_count == n and row.claimed_by is None and row.claim_expires_at is None
    assert row.status is Status.DEAD and row.finished_at == clock.now()
    assert await _outcomes(store, j.id) == [
        (1, Outcome.RETRIED), (2, Outcome.RETRIED), (3, Outcome.DEAD)]
    assert await store.claim(request("k")) == []


async def test_kill_is_dead_at_once_and_counts_a_failure(store: Store, clock: ManualClock) -> None:
    (j,) = await add(store, new_job(max_failures=25))
    claimed = await claim_one(store)
    (res,) = await store.settle_many("w/1", [settlement(claimed, Action.KILL, note="bad-input")])
    assert (res.status, res.outcome) == (Status.DEAD, Outcome.DEAD)
    row = await job(store, j.id)
    assert (row.status, row.failure_count, row.finished_at) == (Status.DEAD, 1, clock.now())
    assert [(e.outcome, e.note) for e in await store.journal(j.id)] == [
        (Outcome.DEAD, "bad-input")]


async def test_pause_and_release_never_count(store: Store, clock: ManualClock) -> None:
    (j,) = await add(store, new_job(max_failures=1))
    for action, outcome in ((Action.PAUSE, Outcome.PAUSED), (Action.RELEASE, Outcome.RELEASED)):
        claimed = await claim_one(store)
        (res,) = await store.settle_many("w/1", [settlement(claimed, action)])
        assert (res.status, res.outcome) == (Status.PENDING, outcome)
        row = await job(store, j.id)
        assert (row.status, row.failure_count, row.finished_at) == (Status.PENDING, 0, None)
    assert await _outcomes(store, j.id) == [(1, Outcome.PAUSED), (2, Outcome.RELEASED)]


async def test_delay_sets_visible_at_from_now(store: Store, clock: ManualClock) -> None:
    await add(store, new_job())
    for action in (Action.FAIL, Action.PAUSE, Action.RELEASE):
        claimed = await claim_one(store)
        clock.advance(3)
        assert await store.settle("w/1", settlement(claimed, action,
                                                   delay=dt.timedelta(seconds=7)))
        assert (await job(store, claimed.id)).visible_at == clock.now() + dt.timedelta(seconds=7)
        clock.advance(6.999)
        assert await store.claim(request("k")) == []
        clock.advance(0.001)


async def test_carry_is_persisted_when_set_and_kept_on_completion(store: Store) -> None:
    (j,) = await add(store, new_job())
    claimed = await claim_one(store)
    assert claimed.carry is None
    assert await store.settle("w/1", settlement(claimed, Action.FAIL, set_carry=True,
                                               carry='{"page": 3}'))
    claimed = await claim_one(store)
    assert claimed.carry == {"page": 3}
    assert await store.settle("w/1", settlement(claimed, Action.PAUSE))  # set_carry False: kept
    claimed = await claim_one(store)
    assert claimed.carry == {"page": 3}
    assert await store.settle("w/1", settlement(claimed, Action.COMPLETE))
    assert (await job(store, j.id)).carry == {"page": 3}


async def test_carry_can_be_cleared(store: Store) -> None:
    (j,) = await add(store, new_job(carry='{"a": 1}'))
    claimed = await claim_one(store)
    assert claimed.carry == {"a": 1}
    assert await store.settle("w/1", settlement(claimed, Action.RELEASE, set_carry=True,
                                               carry=None))
    assert (await job(store, j.id)).carry is None


# --- periodic (docs/concepts/periodic.md) ---------------------------------------------


def _tick(**kw: Any) -> NewJob:
    return new_job("tick", periodic=True, **kw)


async def test_seed_periodic_inserts_one_occurrence(store: Store) -> None:
    assert await store.seed_periodic([_tick()]) == 1
    assert await store.seed_periodic([_tick()]) == 0
    claimed = await claim_one(store, "tick")
    assert claimed.periodic
    assert await store.seed_periodic([_tick()]) == 0  # a claimed occurrence counts too
    assert len(await store.query_jobs(HistoryFilter(limit=100))) == 1


async def test_terminal_periodic_settle_inserts_the_successor(
    store: Store, clock: ManualClock
) -> None:
    await store.seed_periodic([_tick(max_failures=2)])
    for action in (Action.COMPLETE, Action.KILL):
        claimed = await claim_one(store, "tick")
        next_id, next_at = uuid7(), clock.now() + dt.timedelta(minutes=5)
        assert await store.settle("w/1", settlement(claimed, action, successor=(next_id, next_at)))
        nxt = await job(store, next_id)
        assert (nxt.status, nxt.kind, nxt.periodic, nxt.visible_at, nxt.run_count,
                nxt.failure_count, nxt.max_failures) == (
            Status.PENDING, "tick", True, next_at, 0, 0, 2)
        clock.advance(dt.timedelta(minutes=5))


async def test_successor_time_in_the_past_is_clamped_to_now(
    store: Store, clock: ManualClock
) -> None:
    await store.seed_periodic([_tick()])
    claimed = await claim_one(store, "tick")
    next_id = uuid7()
    assert await store.settle("w/1", settlement(
        claimed, Action.COMPLETE, successor=(next_id, clock.now() - dt.timedelta(hours=1))))
    assert (await job(store, next_id)).visible_at == clock.now()


async def test_retry_and_pause_keep_the_periodic_row(store: Store) -> None:
    await store.seed_periodic([_tick(max_failures=5)])
    for action in (Action.FAIL, Action.PAUSE, Action.RELEASE):
        claimed = await claim_one(store, "tick")
        next_id = uuid7()
        assert await store.settle("w/1", settlement(claimed, action,
                                                   successor=(next_id, claimed.created_at)))
        assert await store.job(next_id) is None
        assert (await job(store, claimed.id)).status is Status.PENDING


async def test_redrive_keeps_one_live_periodic_occurrence(store: Store) -> None:
    dead = []
    for _ in range(2):
        await store.seed_periodic([_tick()])
        claimed = await claim_one(store, "tick")
        assert await store.settle("w/1", settlement(claimed, Action.KILL))
        dead.append(claimed.id)
    assert await store.retry(kind="tick") == 1
    assert await store.retry(ids=dead) == 0  # one occurrence is live again
    statuses = sorted([(await job(store, id)).status for id in dead])
    assert statuses == [Status.DEAD, Status.PENDING]


async def test_seed_periodic_with_one_kind_twice_in_a_batch_inserts_one(store: Store) -> None:
    assert await store.seed_periodic([_tick(), _tick(), new_job("tock", periodic=True)]) == 2


async def test_a_job_settled_twice_in_one_batch_applies_once(store: Store) -> None:
    (j,) = await add(store, new_job(max_failures=5))
    claimed = await claim_one(store)
    results = await store.settle_many("w/1", [
        settlement(claimed, Action.FAIL, note="first"),
        settlement(claimed, Action.COMPLETE, note="second"),
    ])
    assert [(r.applied, r.outcome) for r in results] == [(True, Outcome.RETRIED), (False, None)]
    assert [(e.outcome, e.note) for e in await store.journal(j.id)] == [
        (Outcome.RETRIED, "first")]
