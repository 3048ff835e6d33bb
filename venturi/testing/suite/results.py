"""Job results: stored by the completing settle, announced when a job finishes, and
awaited with ``Queue.result`` (docs/concepts/results.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from uuid import UUID

import pytest

from venturi import DatabaseUnavailable, JobCancelled, JobFailed, ManualClock, Queue, Status
from venturi._ids import uuid7
from venturi.notices import parse_finished
from venturi.results import Waiters
from venturi.store.base import Action, Listener, Store
from venturi.testing.builders import add, claim_one, job, new_job, settlement

_WAIT = 10.0  # seconds: a bound on waits for what must happen at once


async def test_completion_stores_the_result_and_nothing_else_does(store: Store) -> None:
    a, b, c = await add(store, new_job(), new_job(), new_job())
    ca, cb, cc = (await claim_one(store), await claim_one(store), await claim_one(store))
    # A batch of plain completions (the stores' short path) and a mixed batch.
    assert await store.settle("w/1", settlement(ca, Action.COMPLETE, result='{"n": [1, 2]}'))
    assert (await job(store, a.id)).result == {"n": [1, 2]}
    applied = await store.settle_many("w/1", [
        settlement(cb, Action.COMPLETE, result='"done"', set_carry=True, carry='{"x": 1}'),
        settlement(cc, Action.FAIL, result='"ignored"'),
    ])
    assert [s.applied for s in applied] == [True, True]
    assert (await job(store, b.id)).result == "done"
    retried = await job(store, c.id)
    assert (retried.status, retried.result) == (Status.PENDING, None)


async def test_a_completion_without_a_result_stores_none(store: Store) -> None:
    (a,) = await add(store, new_job())
    assert await store.settle("w/1", settlement(await claim_one(store), Action.COMPLETE))
    row = await job(store, a.id)
    assert (row.status, row.result) == (Status.COMPLETED, None)


async def _receive_ids(listener: Listener, wanted: set[UUID]) -> set[UUID]:
    """Notifications until every id of ``wanted`` was announced; what was announced."""
    seen: set[UUID] = set()
    async with asyncio.timeout(_WAIT):
        while not wanted <= seen:
            label, payload = await listener.receive()
            assert label == "finished"
            seen.update(parse_finished(payload))
    return seen


async def test_every_way_a_job_finishes_is_announced(store: Store, clock: ManualClock) -> None:
    done, killed, spent, lost, cancelled, running = await add(
        store, new_job("a"), new_job("b"), new_job("c", max_failures=1),
        new_job("d", max_failures=1), new_job("e"), new_job("f"))
    for awaited in (done, killed, spent):  # a settle announces only what is awaited
        await store.watch_job(awaited.id)
    async with store.listen_finished() as listener:
        assert await store.settle("w/1", settlement(await claim_one(store, "a"), Action.COMPLETE))
        assert await store.settle("w/1", settlement(await claim_one(store, "b"), Action.KILL))
        assert await store.settle("w/1", settlement(await claim_one(store, "c"), Action.FAIL))
        await claim_one(store, "d")
        await claim_one(store, "f")
        clock.advance(11)
        assert {r.id for r in await store.recover_stale()} == {lost.id, running.id}
        assert await store.cancel(ids=[cancelled.id]) == 1
        seen = await _receive_ids(listener, {done.id, killed.id, spent.id, lost.id, cancelled.id})
    # The recovered job that is pending again has not finished.
    assert running.id not in seen


async def test_a_settle_announces_only_the_jobs_someone_awaits(store: Store) -> None:
    """Settles announce the jobs flagged by watch_job, in either kind of batch (plain
    completions, a mixed batch), and send nothing for a batch nobody awaits: the NOTIFY
    and its commit lock are only paid for a waiter (sql/0009_awaited.sql)."""
    a, b, c, d, e = await add(store, *(new_job() for _ in range(5)))
    claimed = {x.id: x for x in [await claim_one(store) for _ in range(5)]}
    watched = await store.watch_job(b.id)
    assert watched is not None and watched.status is Status.CLAIMED
    assert await store.watch_job(d.id) is not None
    assert await store.watch_job(uuid7()) is None
    async with store.listen_finished() as listener:
        assert await store.settle("w/1", settlement(claimed[e.id], Action.COMPLETE))
        await store.settle_many("w/1", [settlement(claimed[a.id], Action.COMPLETE),
                                        settlement(claimed[b.id], Action.COMPLETE)])
        await store.settle_many("w/1", [settlement(claimed[c.id], Action.KILL),
                                        settlement(claimed[d.id], Action.KILL)])
        seen = await _receive_ids(listener, {b.id, d.id})
        # Nothing else is on its way: every settle above has committed, and a marker
        # announced after them arrives after anything they sent.
        (marker,) = await add(store, new_job())
        await store.watch_job(marker.id)
        assert await store.settle("w/1", settlement(await claim_one(store), Action.COMPLETE))
        seen |= await _receive_ids(listener, {marker.id})
    assert seen == {b.id, d.id, marker.id}


async def test_result_of_a_job_that_already_completed(store: Store, queue: Queue) -> None:
    (a,) = await add(store, new_job())
    await store.settle("w/1", settlement(await claim_one(store), Action.COMPLETE,
                                         result='{"answer": 42}'))
    assert await queue.result(a.id, timeout=_WAIT) == {"answer": 42}
    assert await queue.result(str(a.id), timeout=0) == {"answer": 42}


async def test_result_waits_for_the_completion(store: Store, queue: Queue) -> None:
    (a,) = await add(store, new_job())
    claimed = await claim_one(store)
    waiting = asyncio.create_task(queue.result(a.id, timeout=_WAIT))
    await asyncio.sleep(0.05)  # let it read the claimed row and wait (not required for the outcome)
    assert not waiting.done()
    await store.settle("w/1", settlement(claimed, Action.COMPLETE, result="[1, 2, 3]"))
    assert await waiting == [1, 2, 3]


async def test_result_of_a_dead_job_raises_job_failed_with_its_reason(
        store: Store, queue: Queue) -> None:
    (a,) = await add(store, new_job())
    claimed = await claim_one(store)
    waiting = asyncio.create_task(queue.result(a.id, timeout=_WAIT))
    await store.settle("w/1", settlement(claimed, Action.KILL, note="unsupported-format"))
    with pytest.raises(JobFailed) as failed:
        await waiting
    assert (failed.value.job_id, failed.value.reason) == (a.id, "unsupported-format")


async def test_result_of_a_cancelled_or_unknown_job_raises_job_cancelled(
        store: Store, queue: Queue) -> None:
    (a,) = await add(store, new_job())
    waiting = asyncio.create_task(queue.result(a.id, timeout=_WAIT))
    await asyncio.sleep(0.05)  # most likely waiting by now; either way the outcome is the same
    assert await store.cancel(ids=[a.id]) == 1
    with pytest.raises(JobCancelled):
        await waiting
    with pytest.raises(JobCancelled):
        await queue.result(uuid7(), timeout=_WAIT)


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (checked every few ms), failing after ``_WAIT`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _WAIT
    while not condition():
        assert loop.time() < deadline, f"still waiting for {what}"
        await asyncio.sleep(0.005)


async def test_result_times_out_and_leaves_no_listener_behind(
        store: Store, queue: Queue) -> None:
    waiters = queue._waiters = Waiters(store, linger=0.05)
    (a,) = await add(store, new_job())
    with pytest.raises(TimeoutError):
        await queue.result(a.id, timeout=0.2)
    with pytest.raises(ValueError, match="timeout"):
        await queue.result(a.id, timeout=-1)
    await _until(lambda: waiters._task is None, "the idle listener closed after its linger")


async def test_results_awaited_one_after_another_share_one_session(
        store: Store, queue: Queue) -> None:
    """The session outlives its last waiter by the linger, so a caller awaiting jobs
    one at a time opens it once; ``Queue.close`` ends it at once."""
    waiters = queue._waiters = Waiters(store, linger=60.0)
    for index in range(3):
        (a,) = await add(store, new_job())
        claimed = await claim_one(store)
        waiting = asyncio.create_task(queue.result(a.id, timeout=_WAIT))
        await _until(partial(dict.__contains__, waiters._events, a.id),
                     "the call waits for its job")
        await store.settle("w/1", settlement(claimed, Action.COMPLETE, result=str(index)))
        assert await waiting == index
        assert waiters._task is not None and not waiters._task.done()
    assert waiters.opened == 1
    task = waiters._task
    assert task is not None
    await queue.close()
    assert waiters._task is None and task.done()


async def test_calls_still_waiting_when_the_queue_closes_end_at_once(
        store: Store, queue: Queue) -> None:
    """``Queue.close`` ends the calls still waiting, as ``SyncQueue.close`` does: one
    without a timeout would otherwise wait for ever on a session that is gone."""
    waiters = queue._waiters = Waiters(store, linger=60.0)
    jobs = await add(store, new_job(), new_job())
    waiting = [asyncio.create_task(queue.result(j.id)) for j in jobs]
    await _until(lambda: all(j.id in waiters._events for j in jobs), "the calls to wait")
    await _until(waiters._live.is_set, "the session to listen")
    await queue.close()
    for j, call in zip(jobs, waiting, strict=True):
        closed = rf"queue was closed while a result\(\) call waited for job {j.id}"
        with pytest.raises(DatabaseUnavailable, match=closed):
            await asyncio.wait_for(call, _WAIT)
    assert waiters._task is None and not waiters._events


async def test_a_close_cancelled_while_the_session_ends_is_cancelled(
        store: Store, queue: Queue) -> None:
    """``Queue.close`` waits for the listening session to end; a caller that cancels it
    meanwhile (a shutdown's deadline) gets its cancel, not a close that returned."""
    waiters = queue._waiters = Waiters(store, linger=60.0)
    (job,) = await add(store, new_job())
    call = asyncio.create_task(queue.result(job.id))
    await _until(lambda: job.id in waiters._events, "the call to wait")
    await _until(waiters._live.is_set, "the session to listen")
    closing = asyncio.create_task(waiters.close())
    await asyncio.sleep(0)  # one step: close() has stopped the session and waits for it
    closing.cancel()
    await asyncio.wait([closing])
    assert closing.cancelled()
    with pytest.raises(DatabaseUnavailable):
        await asyncio.wait_for(call, _WAIT)


async def test_many_waiters_share_one_listener(store: Store, queue: Queue) -> None:
    jobs = await add(store, *(new_job() for _ in range(5)))
    waiting = [asyncio.create_task(queue.result(j.id, timeout=_WAIT)) for j in jobs]
    for index in range(len(jobs)):
        claimed = await claim_one(store)
        await store.settle("w/1", settlement(claimed, Action.COMPLETE, result=str(index)))
    assert sorted(await asyncio.gather(*waiting)) == list(range(5))
