"""The deadline watcher (venturi/worker/deadlines.py): one timer for every run's local
deadline and timeout. Real runs in tasks of their own on the running loop, each inside
its RunScope as the executor runs it; every wait has a deadline."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from venturi.worker.deadlines import DeadlineWatcher
from venturi.worker.held import Held, HeldState, StopReason
from venturi.worker.runscope import RunScope

LONG = 30.0  # a wait only a stop ends within the test's deadline
LEASE = dt.timedelta(seconds=30)


class Run:
    """A held claim whose handler waits until it is stopped; ``stopped_at`` is the loop
    time the stop reached it."""

    def __init__(self, watcher: DeadlineWatcher, due_in: float) -> None:
        loop = asyncio.get_running_loop()
        record: Any = None  # the watcher never reads the job
        self.held = Held(record, LEASE, loop.time() + due_in)
        self.stopped_at: float | None = None
        self._watcher = watcher
        self._started = asyncio.Event()
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        held = self.held
        with RunScope() as scope:
            held.scope, held.state = scope, HeldState.RUNNING
            self._watcher.watch(held)
            self._started.set()
            try:
                await asyncio.sleep(LONG)
            finally:
                self.stopped_at = asyncio.get_running_loop().time()
        held.state = HeldState.SETTLING

    async def started(self) -> Run:
        await asyncio.wait_for(self._started.wait(), 5)
        return self

    async def ended(self) -> float:
        await asyncio.wait_for(self.task, 10)
        assert self.stopped_at is not None
        return self.stopped_at


@pytest.fixture
async def watcher() -> Any:
    watching = DeadlineWatcher(slots=4)
    task = asyncio.ensure_future(watching.run())
    yield watching
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_each_run_stops_at_its_own_due_time_not_before(watcher: DeadlineWatcher) -> None:
    """Runs started in any order of their due times: the timer is moved earlier for one
    due sooner, and each run is stopped at its own time."""
    late = await Run(watcher, 0.6).started()
    soon = await Run(watcher, 0.2).started()
    never = await Run(watcher, LONG * 2).started()
    assert await soon.ended() >= soon.held.due
    assert await late.ended() >= late.held.due
    assert soon.held.stop_reason is late.held.stop_reason is StopReason.LEASE_LOST
    assert not never.task.done() and never.held.stop_reason is None
    never.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await never.task


async def test_a_renewed_run_stops_at_its_new_deadline(watcher: DeadlineWatcher) -> None:
    """A renewal moves the local deadline later after the run was watched: the run's
    entry comes up at the old time, and the run goes on to the new one (stopped at the
    old one, it would have stopped a second early). The old deadline is a second away
    when the renewal comes, so that a stalled loop does not reach it first."""
    loop = asyncio.get_running_loop()
    renewed = await Run(watcher, 1.0).started()
    old_due = renewed.held.due
    renewed.held.set_deadline(loop.time() + 2.0)
    assert await renewed.ended() >= renewed.held.due > old_due + 0.5
    assert renewed.held.stop_reason is StopReason.LEASE_LOST


async def test_a_timeout_due_before_the_deadline_stops_the_run_as_a_timeout(
        watcher: DeadlineWatcher) -> None:
    run = Run(watcher, 5.0)
    run.held.timeout_at = asyncio.get_running_loop().time() + 0.2
    await run.started()
    assert await run.ended() >= run.held.timeout_at
    assert run.held.stop_reason is StopReason.TIMEOUT


async def test_ended_runs_are_swept_out_and_running_ones_kept(watcher: DeadlineWatcher) -> None:
    """Thousands of short runs leave the heap no larger than a few times the slots (it
    holds no finished job for long), and a run that outlives every sweep keeps its entry."""
    long_running = await Run(watcher, LONG).started()
    for _ in range(2_000):
        run = await Run(watcher, LONG).started()
        run.task.cancel()  # the handler returned: what a no-op job does at once
        with pytest.raises(asyncio.CancelledError):
            await run.task
        run.held.state = HeldState.SETTLING
        assert len(watcher._heap) <= 2 * 4 + 64 + 1
    assert long_running.held in [entry[2] for entry in watcher._heap]
    long_running.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long_running.task
