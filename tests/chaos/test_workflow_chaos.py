"""A 1,000-step workflow (fan-out, fan-in and chains) run by real ``venturi worker``
processes, one SIGKILLed (and replaced) at every 100 steps completed up to 800
(docs/concepts/workflows.md): it completes, each step settled once, and no step ran
before every step it waits for had completed. The last step waits for the last kill, so
that a fast machine cannot finish the workflow before it.

The fleet and the verification are the fault-injection run's (benchmarks/chaos.py),
on the shared server: nothing here restarts PostgreSQL, so no ``faults`` marker."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

import venturi
from benchmarks.chaos import ChaosResult, Driver, Fleet, Size, verify
from tests.chaos.tasks import Step, side_ddl
from venturi.store.postgres import PostgresStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

SIZE = Size(jobs=1_000, window=0.0, workers=4, concurrency=4)
KILL_AT = [100 * k for k in range(1, 9)]  # completed steps: a SIGKILL at each
KILL_GAP = 0.5  # seconds at least between two kills


def thousand_steps(gate: Path) -> venturi.Workflow:
    """split -> 450 -> join-1 -> 10 chains of 30 -> join-2 -> 246 -> join-3, which runs
    until ``gate`` exists."""
    wf = venturi.Workflow("chaos-1000")
    n = iter(range(SIZE.jobs))
    split = wf.add(Step(n=next(n)), name="split")
    wide = [wf.add(Step(n=next(n)), after=[split]) for _ in range(450)]
    join1 = wf.add(Step(n=next(n)), after=wide, name="join-1")
    ends = []
    for _ in range(10):
        last = join1
        for _ in range(30):
            last = wf.add(Step(n=next(n)), after=[last])
        ends.append(last)
    join2 = wf.add(Step(n=next(n)), after=ends, name="join-2")
    wide = [wf.add(Step(n=next(n)), after=[join2]) for _ in range(246)]
    wf.add(Step(n=next(n), until_file=str(gate)), after=wide, name="join-3")
    assert len(wf) == SIZE.jobs
    return wf


async def test_workflow_completes_through_sigkilled_workers(
        pg_dsn: str, pg_store_dbclock: PostgresStore, tmp_path: Path) -> None:
    prefix = pg_store_dbclock.prefix
    queue = venturi.Queue(pg_store_dbclock)
    driver = Driver(pg_dsn)
    result = ChaosResult(SIZE)
    fleet = Fleet(pg_dsn, prefix, SIZE, tmp_path, result)
    rng = random.Random(16)
    try:
        await driver.run(lambda c: c.execute(side_ddl(f"{prefix}side")))
        fleet.start_all()
        gate = tmp_path / "last-kill-done"
        workflow = await queue.enqueue_workflow(thousand_steps(gate))
        jobs = f"{prefix}jobs"

        async def completed() -> int:
            n: int = await driver.fetchval(
                f"SELECT count(*) FROM {jobs} WHERE status = 'completed'")
            return n

        # 1,000 steps, a 34-step critical path and 8 lease recoveries on a busy 2-core
        # machine; a workflow stuck after a kill would never finish.
        deadline = time.monotonic() + 150
        next_kill = 0.0
        while (done := await completed()) < SIZE.jobs:
            assert time.monotonic() < deadline, (
                f"{done} of {SIZE.jobs} steps completed after {result.kills} kills: "
                f"{(await queue.workflow(workflow)).counts()}")  # type: ignore[union-attr]
            fleet.check()
            # A kill at each milestone of progress, however fast the machine, and while
            # work is left, so that each can land on steps in flight.
            if result.kills < len(KILL_AT) and done >= KILL_AT[result.kills] \
                    and time.monotonic() >= next_kill:
                fleet.kill_one(rng)
                next_kill = time.monotonic() + KILL_GAP
            if result.kills == len(KILL_AT) and not gate.exists():
                gate.touch()  # the last kill is done: join-3 may end
            await asyncio.sleep(0.05)
        await fleet.stop(driver)
        await verify(driver, prefix, result)
        print(result.block())

        # The kills happened and hit steps in flight (their runs were recovered).
        assert result.kills == len(KILL_AT), result.kills
        recovered = await driver.fetchval(
            f"SELECT count(*) FROM {prefix}journal WHERE outcome = 'stale-recovered'")
        assert recovered > 0
        assert not result.unexpected_exits, result.unexpected_exits
        # Every step completed once: one completing settle each, a hole-free journal.
        assert result.lost == 0 and result.left_claimed == 0
        assert result.double_settlements == 0 and result.journal_holes == 0
        assert result.duplicate_epochs == 0 and result.unrecorded_completions == 0
        state = await queue.workflow(workflow)
        assert state is not None and state.counts() == {"completed": SIZE.jobs}
        # No step ran before each of its dependencies' completing settle: every run it
        # recorded (database clock) is after the dependency's completed journal entry.
        early = await driver.run(lambda c: c.fetch(
            f"SELECT d.job_id, d.after_id FROM {prefix}dependencies d"
            f" JOIN {prefix}journal e ON e.job_id = d.after_id AND e.outcome = 'completed'"
            f" JOIN {prefix}side s ON s.job_id = d.job_id"
            " WHERE s.at <= e.recorded_at LIMIT 5"))
        assert early == [], early
        edges = await driver.fetchval(f"SELECT count(*) FROM {prefix}dependencies")
        assert edges == 450 + 450 + 10 * 30 + 10 + 246 + 246
        assert result.survivor_exit_codes and all(c == 0 for c in result.survivor_exit_codes)
    finally:
        fleet.kill_everything()
        await driver.run(lambda c: c.execute(f"DROP TABLE IF EXISTS {prefix}side"))
        await driver.close()
