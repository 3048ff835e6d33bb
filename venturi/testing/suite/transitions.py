"""Every lifecycle transition, checked against its one definition (venturi.store.lifecycle).

Each test takes a job to the state the transition starts from, applies it through
the store, and compares the row, the journal entry and the wake-ups the store sent
with what ``lifecycle`` says: every settle action with the failure budget spent or
not, for plain and periodic jobs; both recoveries through each of their three
operations; redrive by ids and by kind; merge moving ``visible_at`` earlier, not at
all, or not later.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from ..._ids import uuid7
from ...notices import job_notice, parse_job_notice
from ...store import lifecycle
from ...store.base import (
    Action,
    Listener,
    ManualClock,
    MergeUpdate,
    Recovered,
    Store,
)
from ...store.lifecycle import Recovery, Transition
from ..builders import add, claim_one, job, new_job, settlement

DELAY = dt.timedelta(seconds=7)
MARKER = "conformance-marker"


async def wakeups(store: Store, listener: Listener) -> list[tuple[str, float | None]]:
    """The jobs-channel notices sent since ``listener`` opened, as (kind, due epoch):
    a marker job enqueued now ends them, so no notice can still be on its way."""
    await add(store, new_job(MARKER))
    out: list[tuple[str, float | None]] = []
    while True:
        channel, payload = await asyncio.wait_for(listener.receive(), timeout=10)
        if channel != "jobs":
            continue
        notice = parse_job_notice(payload)
        if notice.kind == MARKER:
            return out
        out.append((notice.kind, None if notice.due is None else round(notice.due.timestamp(), 3)))


def expected_wakeups(t: Transition, kind: str, visible_at: dt.datetime,
                     now: dt.datetime) -> list[tuple[str, float | None]]:
    if not t.wakes:
        return []
    notice = parse_job_notice(job_notice(kind, visible_at, now))
    return [(kind, None if notice.due is None else round(notice.due.timestamp(), 3))]


def successor_wakeups(kind: str, tick: dt.datetime,
                      now: dt.datetime) -> list[tuple[str, float | None]]:
    """The wake-up for a periodic occurrence's successor: at its tick, or runnable now
    when the tick is past (the successor is clamped to now)."""
    notice = parse_job_notice(job_notice(kind, max(tick, now), now))
    return [(kind, None if notice.due is None else round(notice.due.timestamp(), 3))]


async def _entry(store: Store, id: Any) -> tuple[Any, ...]:
    e = (await store.journal(id))[-1]
    return (e.run_no, e.outcome, e.note, e.recorded_at)


async def _claimed_after_one_failure(store: Store, *, max_failures: int, periodic: bool = False,
                                     by: str = "w/1") -> Any:
    """A job claimed for its second run with one failure counted: the next failure
    spends the budget exactly when ``max_failures`` is 2."""
    kind = "tick" if periodic else "k"
    new = new_job(kind, max_failures=max_failures, periodic=periodic)
    if periodic:
        assert await store.seed_periodic([new]) == 1
    else:
        await add(store, new)
    assert await store.settle("w/1", settlement(await claim_one(store, kind), Action.FAIL))
    claimed = await claim_one(store, kind, by=by)
    assert (claimed.run_count, claimed.failure_count) == (2, 1)
    return claimed


SETTLE_CASES = [(a, spent, periodic) for a in Action for spent in (False, True)
                for periodic in (False, True)]


@pytest.mark.parametrize(("action", "spent", "periodic"), SETTLE_CASES, ids=[
    f"{a.value}-{'spent' if s else 'budget-left'}-{'periodic' if p else 'plain'}"
    for a, s, p in SETTLE_CASES])
async def test_settle_transition(store: Store, clock: ManualClock, action: Action, spent: bool,
                                 periodic: bool) -> None:
    max_failures = 2 if spent else 3
    before = await _claimed_after_one_failure(store, max_failures=max_failures,
                                              periodic=periodic)
    assert lifecycle.budget_spent(before.failure_count, max_failures) is spent
    clock.advance(3)
    now = clock.now()
    successor = (uuid7(), now + dt.timedelta(minutes=5)) if periodic else None
    async with store.listen() as listener:
        (result,) = await store.settle_many("w/1", [settlement(
            before, action, note="why", delay=DELAY, successor=successor)])
        woke = await wakeups(store, listener)

    t = lifecycle.settle(action, before.failure_count, before.max_failures)
    assert (result.applied, result.status, result.outcome) == (True, t.status, t.outcome)
    after = await job(store, before.id)
    assert after == t.apply(before, now, delay=DELAY)
    assert await _entry(store, before.id) == (2, t.outcome, "why", now)
    expected = expected_wakeups(t, before.kind, after.visible_at, now)
    if successor is not None:
        assert (await store.job(successor[0]) is not None) is t.status.terminal
        if t.status.terminal:  # the next tick, announced by the same statement
            expected += successor_wakeups(before.kind, successor[1], now)
    assert woke == expected


RECOVERIES = {"recover": Recovery.LEASE_EXPIRED, "recover_stale": Recovery.LEASE_EXPIRED,
              "recover_boot": Recovery.WORKER_RESTARTED}


@pytest.mark.parametrize("spent", [False, True], ids=["budget-left", "spent"])
@pytest.mark.parametrize("operation", list(RECOVERIES))
async def test_recovery_transition(store: Store, clock: ManualClock, operation: str,
                                   spent: bool) -> None:
    before = await _claimed_after_one_failure(store, max_failures=2 if spent else 3,
                                              by="w1/boot-a")
    clock.advance(11)  # past the lease
    now = clock.now()
    async with store.listen() as listener:
        if operation == "recover":
            recovered = [await store.recover(before.id, before.run_count)]
        elif operation == "recover_stale":
            recovered = list(await store.recover_stale())
        else:
            recovered = list(await store.recover_boot("w1", "w1/boot-b"))
        woke = await wakeups(store, listener)

    t = lifecycle.recover(before.failure_count, before.max_failures)
    assert recovered == [Recovered(before.id, before.kind, 2, t.status, "w1/boot-a")]
    after = await job(store, before.id)
    assert after == t.apply(before, now)
    assert await _entry(store, before.id) == (2, t.outcome, RECOVERIES[operation].value, now)
    assert woke == expected_wakeups(t, before.kind, after.visible_at, now)


@pytest.mark.parametrize("by", ["ids", "kind"])
async def test_redrive_transition(store: Store, clock: ManualClock, by: str) -> None:
    (new,) = await add(store, new_job(max_failures=5))
    assert await store.settle("w/1", settlement(await claim_one(store), Action.KILL))
    clock.advance(3)
    now = clock.now()
    before = await job(store, new.id)
    async with store.listen() as listener:
        n = await (store.retry(ids=[new.id]) if by == "ids" else store.retry(kind="k"))
        woke = await wakeups(store, listener)

    t = lifecycle.REDRIVE
    assert n == 1
    after = await job(store, new.id)
    assert after == t.apply(before, now)
    assert await _entry(store, new.id) == (1, t.outcome, lifecycle.REDRIVE_NOTE, now)
    assert woke == expected_wakeups(t, before.kind, after.visible_at, now)


@pytest.mark.parametrize("requested", [-5, None, 120], ids=["earlier", "unchanged", "later"])
async def test_merge_transition(store: Store, clock: ManualClock, requested: int | None) -> None:
    (new,) = await add(store, new_job(dedup_key="d", delay=60))
    clock.advance(1)
    now = clock.now()
    before = await job(store, new.id)
    when = None if requested is None else now + dt.timedelta(seconds=requested)
    async with store.listen() as listener:
        assert await store.merge_into(new.id, MergeUpdate(), visible_at=when, note="why")
        woke = await wakeups(store, listener)

    t = lifecycle.MERGE
    after = await job(store, new.id)
    assert after == t.apply(before, now, requested=when)
    assert await _entry(store, new.id) == (0, t.outcome, "why", now)
    assert woke == expected_wakeups(t, before.kind, after.visible_at, now)


SUCCESSOR_CASES = [(a, due) for a in (Action.COMPLETE, Action.KILL) for due in (300, -60)]


@pytest.mark.parametrize(("action", "due"), SUCCESSOR_CASES, ids=[
    f"{a.value}-{'later' if d > 0 else 'overdue'}" for a, d in SUCCESSOR_CASES])
async def test_terminal_periodic_settle_announces_its_successor(
        store: Store, clock: ManualClock, action: Action, due: int) -> None:
    """The settle that ends an occurrence inserts the next one and announces it like an
    enqueue would (docs/concepts/periodic.md): workers that did not run the occurrence
    arm their timers for a tick due later, and claim at once for one already due. In a
    batch with a retried job, each kind gets its own wake-up."""
    assert await store.seed_periodic([new_job("tick", periodic=True)]) == 1
    await add(store, new_job("k"))
    ticked = await claim_one(store, "tick")
    failed = await claim_one(store, "k")
    clock.advance(3)
    now = clock.now()
    next_id, tick = uuid7(), now + dt.timedelta(seconds=due)
    async with store.listen() as listener:
        results = await store.settle_many("w/1", [
            settlement(ticked, action, successor=(next_id, tick)),
            settlement(failed, Action.FAIL, delay=DELAY)])
        woke = await wakeups(store, listener)

    assert [r.applied for r in results] == [True, True]
    assert (await job(store, next_id)).visible_at == max(tick, now)
    assert sorted(woke, key=lambda w: w[0]) == [
        ("k", round((now + DELAY).timestamp(), 3)),
        *successor_wakeups("tick", tick, now)]
