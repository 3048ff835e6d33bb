"""Workflows: a DAG of steps enqueued atomically, read back step by step, cancelled as a
whole (docs/concepts/workflows.md)."""

from __future__ import annotations

import datetime as dt

import pytest

from venturi import Queue, Status, Task, Workflow
from venturi._ids import uuid7
from venturi.store.base import Action, CleanupCriteria, CountFilter, Store
from venturi.store.clocks import ManualClock
from venturi.testing.builders import claim_one, request, settlement


class Step(Task, kind="suite.step"):
    n: int = 0

    async def run(self, ctx: object) -> None:  # pragma: no cover - never run here
        return None


KIND = "suite.step"


async def _complete_all_claimable(store: Store) -> list[int]:
    claimed = await store.claim(request(KIND, limit=100))
    for job in claimed:
        assert await store.settle("w/1", settlement(job, Action.COMPLETE,
                                                    result=str(job.payload["n"])))
    return sorted(job.payload["n"] for job in claimed)


async def test_a_fan_out_fan_in_workflow_runs_in_dependency_order(
        store: Store, queue: Queue) -> None:
    wf = Workflow("ingest")
    a = wf.add(Step(n=0), name="split")
    middle = [wf.add(Step(n=i), after=[a]) for i in (1, 2, 3)]
    wf.add(Step(n=9), after=middle, name="join")
    id = await queue.enqueue_workflow(wf)

    state = await queue.workflow(id)
    assert state is not None and state.name == "ingest"
    assert [s.name for s in state.steps] == ["split", "step-2", "step-3", "step-4", "join"]
    assert state.counts() == {"pending": 5}
    assert state.steps[-1].after == sorted(m.id for m in middle)
    assert state.steps[-1].job is not None and state.steps[-1].job.waiting == 3

    assert await _complete_all_claimable(store) == [0]
    assert await _complete_all_claimable(store) == [1, 2, 3]
    assert await _complete_all_claimable(store) == [9]
    assert await _complete_all_claimable(store) == []
    state = await queue.workflow(str(id))
    assert state is not None and state.counts() == {"completed": 5}
    assert all(s.duration is not None for s in state.steps)
    assert await queue.result(state.steps[-1].id, timeout=5) == 9


async def test_a_bad_workflow_is_refused_before_anything_is_written(
        store: Store, queue: Queue) -> None:
    cyclic = Workflow("cyclic")
    cyclic.add(Step(n=1), name="a", after=["b"])
    cyclic.add(Step(n=2), name="b", after=["a"])
    with pytest.raises(ValueError, match="cycle"):
        await queue.enqueue_workflow(cyclic)
    unknown = Workflow("unknown")
    unknown.add(Step(), after=["nowhere"])
    with pytest.raises(ValueError, match="unknown step 'nowhere'"):
        await queue.enqueue_workflow(unknown)
    other = Workflow("other")
    foreign = other.add(Step())
    mixed = Workflow("mixed")
    mixed.add(Step(), after=[foreign])
    with pytest.raises(ValueError, match="another workflow"):
        await queue.enqueue_workflow(mixed)
    with pytest.raises(ValueError, match="no steps"):
        await queue.enqueue_workflow(Workflow("empty"))
    assert await store.count(CountFilter()) == 0
    assert await queue.workflow(uuid7()) is None


async def test_a_step_can_wait_for_a_job_outside_the_workflow(
        store: Store, queue: Queue) -> None:
    outside = await queue.enqueue(Step(n=100))
    wf = Workflow("after-outside")
    wf.add(Step(n=1), after=[outside.id])
    await queue.enqueue_workflow(wf)
    assert await _complete_all_claimable(store) == [100]
    assert await _complete_all_claimable(store) == [1]


async def test_cancelling_a_workflow_cancels_its_unfinished_steps(
        store: Store, queue: Queue) -> None:
    wf = Workflow("doomed")
    a = wf.add(Step(n=0))
    b = wf.add(Step(n=1), after=[a])
    wf.add(Step(n=2), after=[b])
    id = await queue.enqueue_workflow(wf)
    first = await claim_one(store, KIND)
    assert await store.settle("w/1", settlement(first, Action.COMPLETE))
    assert await queue.cancel(workflow=id) == 2
    state = await queue.workflow(id)
    assert state is not None
    assert [s.status for s in state.steps] == [Status.COMPLETED, None, None]
    assert await queue.cancel(workflow=uuid7()) == 0


async def test_a_workflows_record_goes_with_its_last_step(
        store: Store, queue: Queue, clock: ManualClock) -> None:
    """Cleanup, retention and cancel remove a workflow's record (and with its steps
    their results) in the statement that removes its last step, never before."""
    later = await store.db_now() + dt.timedelta(days=1)
    done, half, kept = Workflow("done"), Workflow("half"), Workflow("kept")
    a = done.add(Step(n=0))
    b = done.add(Step(n=1), after=[a])
    h = half.add(Step(n=2))
    half.add(Step(n=3), after=[h])
    k = kept.add(Step(n=4))
    kept.add(Step(n=5), after=[k])
    ids = [await queue.enqueue_workflow(wf) for wf in (done, half, kept)]
    assert await _complete_all_claimable(store) == [0, 2, 4]
    clock.advance(dt.timedelta(seconds=1))
    assert await _complete_all_claimable(store) == [1, 3, 5]
    half_b = (await queue.workflow(ids[1])).steps[1].id  # type: ignore[union-attr]

    # Retention's batch: only the completed steps of "done" and "half" are old enough.
    n = await store.cleanup_exclusive(CleanupCriteria(later, kind=KIND, batch_size=3))
    assert n == 3  # oldest first: 0, 2, 4 finished before 1, 3, 5
    for id in ids:
        assert await queue.workflow(id) is not None  # each still has a step
    assert await queue.cleanup(finished_before=later) == 3
    for id in ids:
        assert await queue.workflow(id) is None
    assert await queue.job(b.id) is None and await queue.job(half_b) is None
    assert await store.results([a.id, b.id]) == {}

    # Cancel: the record goes with the last step it removes, and stays with one left.
    pending = Workflow("pending")
    first = pending.add(Step(n=6))
    second = pending.add(Step(n=7), after=[first])
    id = await queue.enqueue_workflow(pending)
    assert await queue.cancel(ids=[second.id]) == 1
    assert await queue.workflow(id) is not None
    assert await queue.cancel(workflow=id) == 1
    assert await queue.workflow(id) is None
