"""Worker processes killed, poisoned, signalled, duplicated and drained (DESIGN §4 rules 6, 8,
9, 14; §6 drain). Real processes on a real PostgreSQL; every wait has a deadline."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

import venturi
from venturi import Outcome, Queue, Status
from venturi.errors import ConfigError

from ..conftest import wait_for
from .conftest import SideTable, worker_up
from .proctasks import POISON_EXIT, Hang, Long, Poison, Quick

pytestmark = pytest.mark.timeout(90)


async def journal_of(queue: Queue, job_id: Any) -> list[tuple[int, Outcome, str | None]]:
    return [(e.run_no, e.outcome, e.note) for e in await queue.journal(job_id)]


async def status_is(queue: Queue, job_id: Any, status: Status) -> bool:
    row = await queue.job(job_id)
    return row is not None and row.status is status


async def test_kill9_mid_job_recovers_after_the_lease_and_completes_once(
        pgq: Queue, side: SideTable, spawn: Any) -> None:
    a = spawn(name="a", concurrency=1)
    job = await pgq.enqueue(Hang())
    await wait_for(lambda: side.rows(job.id), timeout=30, what="a to boot and run 1 to start")
    assert await side.runs(job.id) == [(1, a.pid)]
    before = await pgq.job(job.id)
    assert before is not None and before.claim_expires_at is not None
    b = spawn(name="b", concurrency=1)  # boots while A's lease runs out
    a.kill9()

    await wait_for(lambda: status_is(pgq, job.id, Status.COMPLETED), timeout=30,
                   what="b to boot and the recovered job to complete")
    row = await pgq.job(job.id)
    assert row is not None and (row.run_count, row.failure_count) == (2, 1)
    assert row.carry is None  # the crash lost the carry that run 1 never saved
    assert await journal_of(pgq, job.id) == [
        (1, Outcome.STALE_RECOVERED, "lease-expired"), (2, Outcome.COMPLETED, "done")]
    assert await side.runs(job.id) == [(1, a.pid), (2, b.pid)]
    # Timeout-only recovery: not before the dead worker's last lease ran out.
    stale = (await pgq.journal(job.id))[0]
    assert stale.recorded_at >= before.claim_expires_at


async def test_poison_job_that_kills_its_process_ends_dead_after_max_failures_runs(
        pgq: Queue, side: SideTable, spawn: Any) -> None:
    job = await pgq.enqueue(Poison())
    procs: list[Any] = []

    async def dead_or_restart() -> bool:
        if await status_is(pgq, job.id, Status.DEAD):
            return True
        # Two live workers at all times, so one is up when the lease of the job's
        # last victim runs out. Default names: no boot recovery between them.
        while sum(p.alive() for p in procs) < 2:
            assert len(procs) < 8, "the poison job is looping instead of dying"
            procs.append(spawn(concurrency=1))
        return False

    await wait_for(dead_or_restart, timeout=60, interval=0.05, what="the poison job to die")
    row = await pgq.job(job.id)
    assert row is not None and (row.run_count, row.failure_count) == (3, 3)
    assert await journal_of(pgq, job.id) == [
        (1, Outcome.STALE_RECOVERED, "lease-expired"),
        (2, Outcome.STALE_RECOVERED, "lease-expired"),
        (3, Outcome.DEAD, "lease-expired"),
    ]
    # Three processes ran it and died of it, one run each; no other process died.
    victims = {p.pid: p.returncode for p in procs if p.exited()}
    assert list(victims.values()) == [POISON_EXIT] * 3
    runs = await side.runs(job.id)
    assert [n for n, _ in runs] == [1, 2, 3] and {pid for _, pid in runs} == set(victims)


async def test_sigterm_releases_long_jobs_and_exits_0_within_grace(
        pgq: Queue, side: SideTable, spawn: Any) -> None:
    grace = 2.0
    w = spawn(concurrency=3, grace=grace)
    jobs = [await pgq.enqueue(Long()) for _ in range(2)]
    short = await pgq.enqueue(Long(seconds=0.5))  # finishes within the grace period
    await wait_for(lambda: worker_up(pgq, w), timeout=30)
    await wait_for(lambda: _started(side, 3), what="all three jobs to start")

    sent = time.monotonic()
    w.signal(signal.SIGTERM)
    await wait_for(w.exited, timeout=grace + 15, what="the worker to exit")
    elapsed = time.monotonic() - sent
    assert w.returncode == 0, w.errors()
    # It waited for the grace period, then stopped: not for the long jobs (120 s).
    assert grace - 0.1 <= elapsed <= grace + 10
    for job in jobs:
        row = await pgq.job(job.id)
        assert row is not None and row.status is Status.PENDING
        assert (row.failure_count, row.claimed_by) == (0, None)  # a release is no failure
        (entry,) = await pgq.journal(job.id)
        assert (entry.run_no, entry.outcome) == (1, Outcome.RELEASED)
        assert row.visible_at <= entry.recorded_at  # visible again at once
    assert await journal_of(pgq, short.id) == [(1, Outcome.COMPLETED, None)]
    assert [r["job_id"] for r in await side.rows(event="end")] == [short.id]


async def test_second_signal_during_drain_exits_130_at_once_and_releases(
        pgq: Queue, side: SideTable, spawn: Any) -> None:
    w = spawn(concurrency=2, grace=60)
    jobs = [await pgq.enqueue(Long()) for _ in range(2)]
    await wait_for(lambda: worker_up(pgq, w), timeout=30)
    await wait_for(lambda: _started(side, 2), what="both jobs to start")
    w.signal(signal.SIGTERM)
    await wait_for(lambda: w.logged("drain_requested"), what="the drain to begin")
    assert w.alive()  # waiting for its jobs, up to 60 s

    w.signal(signal.SIGINT)
    # Within this wait at all means it did not wait out the 60 s grace.
    await wait_for(w.exited, timeout=15, what="the forced stop")
    assert w.returncode == 130, w.errors()
    for job in jobs:
        row = await pgq.job(job.id)
        assert row is not None and (row.status, row.failure_count) == (Status.PENDING, 0)
        assert await journal_of(pgq, job.id) == [(1, Outcome.RELEASED, "drain")]


async def test_second_worker_with_the_same_explicit_name_refuses(
        pgq: Queue, side: SideTable, spawn: Any) -> None:
    a = spawn(name="dup")
    await wait_for(lambda: worker_up(pgq, a), timeout=30)
    b = spawn(name="dup")
    await wait_for(b.exited, timeout=30, what="the second worker to refuse")
    assert b.returncode == 2
    lines = b.errors().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: worker name 'dup' is held"), lines
    assert a.alive()
    # The same in-process: ConfigError before any claim.
    with pytest.raises(ConfigError, match="held by a live worker"):
        await venturi.Worker(pgq, tasks=[Quick], name="dup").run()


async def test_shared_default_names_never_recover_live_claims(
        pgq: Queue, side: SideTable, spawn: Any) -> None:
    """Two "containers" on one hostname, both pid 1: the same default name."""
    a = spawn(default_name="box:1", concurrency=2)
    jobs = [await pgq.enqueue(Long()) for _ in range(2)]
    await wait_for(lambda: _started(side, 2), timeout=30, what="A to boot and run both jobs")
    claims = {j.id: (await pgq.job(j.id)) for j in jobs}
    owner = {row.claimed_by for row in claims.values() if row is not None}
    assert len(owner) == 1 and next(iter(owner)).startswith("box:1/")

    b = spawn(default_name="box:1", concurrency=2)
    c = spawn(name="box:1")  # an explicit restart while A lives
    await wait_for(lambda: worker_up(pgq, b), timeout=30)
    names = {w.pid: w.name for w in await pgq.workers()}
    assert names[a.pid] == "box:1"
    assert names[b.pid].startswith("box:1-") and b.logged("worker_name_taken")
    # B works, under its own name: A's slots are full, so B runs this one.
    quick = await pgq.enqueue(Quick())
    await wait_for(lambda: status_is(pgq, quick.id, Status.COMPLETED), what="B to run a job")
    assert await side.runs(quick.id) == [(1, b.pid)]
    # The explicit restart while A lives is refused and recovers nothing.
    await wait_for(c.exited, timeout=30, what="the explicit-name worker to refuse")
    assert c.returncode == 2
    for job in jobs:
        row = await pgq.job(job.id)
        assert row is not None and (row.status, row.claimed_by) == (Status.CLAIMED, *owner)
        assert await pgq.journal(job.id) == []

    # A dies; its restart under the explicit name takes the lock and recovers A's
    # claims at boot, long before their 30 s leases would have expired.
    a.kill9()
    a2 = spawn(name="box:1", concurrency=2)
    for job in jobs:
        await wait_for(lambda j=job: _runs(side, j.id, 2), timeout=30, what="the rerun")
        entries = await pgq.journal(job.id)
        assert [(e.run_no, e.outcome, e.note) for e in entries] == [
            (1, Outcome.STALE_RECOVERED, "worker-restarted")]
        row = await pgq.job(job.id)
        assert row is not None and row.failure_count == 1  # a boot recovery is a failure
        before = claims[job.id]
        assert before is not None and before.claim_expires_at is not None
        assert entries[0].recorded_at < before.claim_expires_at
        # Pending again: whoever has a free slot (A's restart or B) runs it.
        first, second = await side.runs(job.id)
        assert first == (1, a.pid) and second[1] in (a2.pid, b.pid)
    assert b.alive()


async def test_drain_over_the_control_channel_stops_only_the_named_worker(
        pgq: Queue, side: SideTable, spawn: Any) -> None:
    w = spawn(name="drainme", concurrency=1, grace=1, poll=60)
    await wait_for(lambda: worker_up(pgq, w), timeout=30)
    await pgq.store.notify_control({"op": "drain", "worker": "someone-else", "grace": 1})
    # Notifications arrive in commit order: once this job ran, the drain above was seen.
    quick = await pgq.enqueue(Quick())
    await wait_for(lambda: status_is(pgq, quick.id, Status.COMPLETED), what="the worker to run")
    assert w.alive() and not w.logged("drain_requested")

    long = await pgq.enqueue(Long())
    await wait_for(lambda: side.rows(long.id), what="the long job to start")
    await pgq.store.notify_control({"op": "drain", "worker": "drainme", "grace": 1})
    # Within this wait at all means it did not wait for the long job (120 s).
    await wait_for(w.exited, timeout=1 + 15, what="the drained worker to exit")
    assert w.returncode == 0, w.errors()
    assert await journal_of(pgq, long.id) == [(1, Outcome.RELEASED, "drain")]


async def _started(side: SideTable, n: int, event: str = "start") -> bool:
    return len(await side.rows(event=event)) >= n


async def _runs(side: SideTable, job_id: Any, n: int) -> bool:
    return len(await side.runs(job_id)) >= n
