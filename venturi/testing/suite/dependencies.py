"""Dependencies: a job enqueued after others waits, pending and invisible, until they
complete; a failed dependency fails it (docs/concepts/workflows.md)."""

from __future__ import annotations

import dataclasses
from uuid import UUID

import pytest

from venturi import JobFailed, ManualClock, Outcome, Queue, Status
from venturi._ids import uuid7
from venturi.store.base import Action, NewJob, Store
from venturi.testing.builders import add, claim_one, job, new_job, request, settlement

FAILED = "dependency-failed"


def after(*parents: NewJob | UUID, run: bool = False, kind: str = "k") -> NewJob:
    ids = tuple(p.id if isinstance(p, NewJob) else p for p in parents)
    return dataclasses.replace(new_job(kind), after=ids, run_on_failure=run)


async def _complete(store: Store, kind: str = "k") -> UUID:
    claimed = await claim_one(store, kind)
    assert await store.settle("w/1", settlement(claimed, Action.COMPLETE))
    return claimed.id


async def _outcomes(store: Store, id: UUID) -> list[tuple[Outcome, str | None]]:
    return [(e.outcome, e.note) for e in await store.journal(id)]


async def test_a_dependent_waits_invisible_until_its_dependencies_completed(
        store: Store) -> None:
    a, b = await add(store, new_job("p"), new_job("p"))
    (c,) = await add(store, after(a, b))
    row = await job(store, c.id)
    assert (row.status, row.waiting) == (Status.PENDING, 2)
    assert await store.claim(request("k")) == []
    assert await store.next_visible_at(["k"]) is None
    await _complete(store, "p")
    assert (await job(store, c.id)).waiting == 1
    assert await store.claim(request("k")) == []
    await _complete(store, "p")
    row = await job(store, c.id)
    assert row.waiting == 0
    assert [j.id for j in await store.claim(request("k"))] == [c.id]


async def test_a_completed_dependency_counts_at_enqueue(store: Store) -> None:
    (a,) = await add(store, new_job("p"))
    await _complete(store, "p")
    (c,) = await add(store, after(a))
    assert (await job(store, c.id)).waiting == 0
    assert [j.id for j in await store.claim(request("k"))] == [c.id]


async def test_a_dead_dependency_fails_its_dependents_transitively(
        store: Store, queue: Queue) -> None:
    (a,) = await add(store, new_job("p"))
    (b,) = await add(store, after(a, kind="m"))
    (c,) = await add(store, after(b))
    (keep,) = await add(store, after(a, run=True, kind="r"))
    claimed = await claim_one(store, "p")
    assert await store.settle("w/1", settlement(claimed, Action.KILL, note="boom"))
    for dependent in (b, c):
        row = await job(store, dependent.id)
        assert (row.status, row.failure_count) == (Status.DEAD, 0)
        assert await _outcomes(store, dependent.id) == [(Outcome.DEAD, FAILED)]
    with pytest.raises(JobFailed) as failed:
        await queue.result(c.id, timeout=5)
    assert failed.value.reason == FAILED
    # after_failure="run": the failed dependency counts as finished.
    assert [j.id for j in await store.claim(request("r"))] == [keep.id]
    snapshot = await store.stats()
    assert snapshot.dead_by_kind == {"p": 1, "m": 1, "k": 1}


async def test_a_dependency_dead_or_gone_at_enqueue_fails_the_dependent(store: Store) -> None:
    (a,) = await add(store, new_job("p"))
    claimed = await claim_one(store, "p")
    assert await store.settle("w/1", settlement(claimed, Action.KILL, note="boom"))
    dead, gone, runs = await add(store, after(a), after(uuid7()), after(a, run=True))
    for id in (dead.id, gone.id):
        assert (await job(store, id)).status is Status.DEAD
        assert await _outcomes(store, id) == [(Outcome.DEAD, FAILED)]
    assert (await job(store, runs.id)).waiting == 0


async def test_cancelling_a_dependency_fails_its_dependents(store: Store) -> None:
    a, b = await add(store, new_job("p"), new_job("p"))
    (c,) = await add(store, after(a))
    (d,) = await add(store, after(b))
    await claim_one(store, "p")  # a: cancelled while it runs
    assert await store.cancel(ids=[a.id, b.id]) == 2
    for id in (c.id, d.id):
        assert (await job(store, id)).status is Status.DEAD
        assert await _outcomes(store, id) == [(Outcome.DEAD, FAILED)]


async def test_redriving_a_dead_dependency_brings_its_failed_dependents_back(
        store: Store, clock: ManualClock) -> None:
    (a,) = await add(store, new_job("p"))
    (b,) = await add(store, after(a, kind="m"))
    (c,) = await add(store, after(b))
    claimed = await claim_one(store, "p")
    assert await store.settle("w/1", settlement(claimed, Action.KILL, note="boom"))
    assert await store.retry(ids=[a.id]) == 1
    for id in (b.id, c.id):
        row = await job(store, id)
        assert (row.status, row.waiting, row.finished_at) == (Status.PENDING, 1, None)
        assert await _outcomes(store, id) == [(Outcome.DEAD, FAILED),
                                              (Outcome.REDRIVEN, "dependency-redriven")]
    await _complete(store, "p")
    await _complete(store, "m")
    assert [j.id for j in await store.claim(request("k"))] == [c.id]


async def test_results_of_dependencies(store: Store) -> None:
    a, b = await add(store, new_job("p"), new_job("p"))
    (c,) = await add(store, after(a, b))
    for value in ('"one"', '{"two": 2}'):
        claimed = await claim_one(store, "p")
        assert await store.settle("w/1", settlement(claimed, Action.COMPLETE, result=value))
    assert await store.results([a.id, b.id, uuid7()]) == {a.id: "one", b.id: {"two": 2}}
    assert sorted(await store.dependencies(c.id)) == sorted([a.id, b.id])
