"""Losing the database is not a crash (DESIGN §4 rule 15), on a private cluster that the
test stops for longer than a lease, and restarts, under a running worker."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from structlog.testing import capture_logs

import venturi
from venturi import Outcome, Queue, Status
from venturi.errors import ConfigError
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from ..faults_cluster import PrivateCluster, private_pg, queue_on  # noqa: F401
from .conftest import SideTable, WorkerProcess, running, worker_up
from .proctasks import Long, side_ddl

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]
OUTAGE = 12.0  # seconds: longer than the lease below, so a reap before the flush would show


class Gate:
    open: asyncio.Event
    started: dict[UUID, float]
    finished: set[UUID]

    @classmethod
    def reset(cls) -> None:
        cls.open, cls.started, cls.finished = asyncio.Event(), {}, set()


class Held(venturi.Task, kind="wo.held", lease=dt.timedelta(seconds=9)):
    async def run(self, ctx: venturi.Context) -> str:
        Gate.started[ctx.job_id] = time.monotonic()
        await Gate.open.wait()
        Gate.finished.add(ctx.job_id)
        return "done"


@pytest.fixture
async def outage_queue(private_pg: PrivateCluster) -> AsyncIterator[Queue]:  # noqa: F811
    async with queue_on(private_pg, max_size=10) as queue:
        yield queue


def count(logs: list[dict[str, Any]], event: str) -> int:
    return sum(1 for e in logs if e["event"] == event)


class Parked(venturi.Task, kind="wo.parked", lease=dt.timedelta(seconds=60)):
    """Runs until cancelled; a 60 s lease keeps renewal 20 s away."""

    async def run(self, ctx: venturi.Context) -> None:
        Gate.started[ctx.job_id] = time.monotonic()
        await asyncio.Event().wait()


async def listening_again(queue: Queue, logs: list[dict[str, Any]]) -> None:
    """LISTEN is back: a cancel reaches a running handler as ``job_cancelled`` (renewal,
    the only other way, is 20 s away and would log ``lease_lost``)."""
    job = await queue.enqueue(Parked())
    await wait_for(lambda: job.id in Gate.started, timeout=20, what="pickup")
    assert await queue.cancel(ids=[job.id]) == 1
    await wait_for(lambda: any(e["event"] == "job_cancelled" and e.get("job_id") == str(job.id)
                               for e in logs), what="the cancel to reach the handler")


async def lock_is_held(queue: Queue, name: str) -> None:
    """The name's lock died with its session and was taken again (rule 9)."""
    store = queue.store
    assert isinstance(store, PostgresStore)
    key = f"venturi:worker:{queue.prefix}:{name}"

    async def held() -> bool:
        return bool(await store.pool.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0)", key))
    await wait_for(held, timeout=10, what="the name's lock to be taken again")
    with pytest.raises(ConfigError, match="held by a live worker"):
        await venturi.Worker(queue, tasks=[Held], name=name).run()


async def completed_once(queue: Queue, ids: list[UUID]) -> None:
    for id in ids:
        row = await queue.job(id)
        assert row is not None and (row.status, row.run_count, row.failure_count) == (
            Status.COMPLETED, 1, 0)
        assert [(e.run_no, e.outcome) for e in await queue.journal(id)] == [
            (1, Outcome.COMPLETED)]


async def test_worker_rides_out_a_database_outage_and_a_restart(
        private_pg: PrivateCluster, outage_queue: Queue) -> None:  # noqa: F811
    queue = outage_queue
    Gate.reset()
    worker = venturi.Worker(queue, tasks=[Held, Parked], concurrency=4, poll_interval=60,
                            name="survivor")
    with capture_logs() as logs:
        async with running(worker) as w:
            jobs = [(await queue.enqueue(Held())).id for _ in range(4)]
            await wait_for(lambda: len(Gate.started) == 4, what="four jobs to start")

            # The outage: the jobs finish while the database is down.
            await asyncio.to_thread(private_pg.stop)
            stopped = time.monotonic()
            await wait_for(lambda: not w.health.ready, what="not ready")
            Gate.open.set()
            await wait_for(lambda: len(Gate.finished) == 4, what="the handlers to finish")
            while time.monotonic() - stopped < OUTAGE:
                assert not w.health.ready and w.health.alive
                assert w.held == 4  # buffered settlements keep their jobs held
                await asyncio.sleep(0.1)
            assert count(logs, "db_unavailable") == 1
            await asyncio.to_thread(private_pg.start)

            await wait_for(lambda: w.health.ready, timeout=20, what="ready again")
            await wait_for(lambda: w.held == 0, timeout=10, what="the flush")
            # Flushed before the first reap: every lease had run out, yet no job was
            # recovered and none completed twice.
            await completed_once(queue, jobs)
            assert count(logs, "db_unavailable") == 1 and count(logs, "db_available") >= 1
            assert count(logs, "job_recovered") == 0 and count(logs, "settle_refused") == 0
            await lock_is_held(queue, "survivor")
            await listening_again(queue, logs)

            # A restart, with jobs in flight.
            Gate.reset()
            more = [(await queue.enqueue(Held())).id for _ in range(2)]
            await wait_for(lambda: len(Gate.started) == 2, what="two jobs to start")
            await asyncio.to_thread(private_pg.restart)
            Gate.open.set()
            await wait_for(lambda: w.held == 0, timeout=20, what="the settles after restart")
            await wait_for(lambda: w.health.ready, timeout=20, what="ready after restart")
            await completed_once(queue, more)
            assert count(logs, "db_unavailable") == 2  # once per outage
            await listening_again(queue, logs)
            await lock_is_held(queue, "survivor")
    assert worker.exit_code == 0


async def test_worker_started_while_the_database_is_down_waits_for_it(
        private_pg: PrivateCluster, outage_queue: Queue) -> None:  # noqa: F811
    queue = outage_queue
    Gate.reset()
    Gate.open.set()
    job = await queue.enqueue(Held())
    await asyncio.to_thread(private_pg.stop)
    worker = venturi.Worker(queue, tasks=[Held], concurrency=1, name="patient")
    with capture_logs() as logs:
        async with running(worker, ready=False) as w:
            await wait_for(lambda: count(logs, "db_unavailable") == 1, what="db_unavailable")
            assert not w.health.ready
            await asyncio.to_thread(private_pg.start)
            await wait_for(lambda: w.health.ready, timeout=20, what="ready after the outage")
            await wait_for(lambda: job.id in Gate.finished, timeout=10, what="the queued job")
            await wait_for(lambda: w.held == 0, what="its settle")
            await completed_once(queue, [job.id])
    assert count(logs, "db_unavailable") == 1


@pytest.fixture
async def side_on_private(outage_queue: Queue, private_pg: PrivateCluster) -> SideTable:  # noqa: F811
    conn = await asyncpg.connect(private_pg.dsn)
    await conn.execute(side_ddl(outage_queue.prefix))
    return SideTable(conn, outage_queue.prefix)


@pytest.mark.parametrize("second_signal", [False, True])
async def test_signals_stop_a_worker_whose_settlements_wait_for_the_database(
        private_pg: PrivateCluster, outage_queue: Queue,  # noqa: F811
        side_on_private: SideTable, tmp_path: Path, second_signal: bool) -> None:
    """A drain must not wait for the database: exit 0 after the bounded final flush, or 130
    at once on a second signal, leaving the unwritten settlements to their leases."""
    queue = outage_queue
    # The final flush waits max(5 s, grace) for the database. With a second signal the
    # grace is long, so that the flush the signal cuts short (to 1 s) would be 20 s.
    grace = 20.0 if second_signal else 3.0
    w = WorkerProcess(["--dsn", private_pg.dsn, "--prefix", queue.prefix, "--grace", str(grace),
                       "--concurrency", "2"], tmp_path / "worker.log")
    try:
        await wait_for(lambda: worker_up(queue, w), timeout=20)
        ends = tmp_path / "ends"
        ends.mkdir()
        release = tmp_path / "release"
        await queue.enqueue_many([Long(seconds=60, end_dir=str(ends), until_file=str(release))
                                  for _ in range(2)])
        await wait_for(lambda: _started(side_on_private, 2), what="both jobs to start")
        await side_on_private.conn.close()
        await asyncio.to_thread(private_pg.stop)
        # Both runs end during the outage, once it has begun: their settlements are
        # buffered.
        release.touch()
        await wait_for(lambda: len(list(ends.iterdir())) == 2, what="both runs to end")
        await wait_for(lambda: w.logged("db_unavailable"), what="the outage to be noticed")
        sent = time.monotonic()
        w.signal(signal.SIGTERM)
        if second_signal:
            await wait_for(lambda: w.logged("drain_requested"), what="the drain to begin")
            sent = time.monotonic()
            w.signal(signal.SIGINT)
            await wait_for(w.exited, timeout=15, what="the forced stop")
            assert w.returncode == 130, w.errors()
            # Not the 20 s flush: the second signal cut it to 1 s.
            assert time.monotonic() - sent < 10, w.output()
        else:
            await wait_for(w.exited, timeout=25, what="the drained worker to exit")
            assert w.returncode == 0, w.errors()
            # Nothing is running, so no grace period: only the bounded final flush (5 s),
            # not a wait for the database, which stays down.
            assert time.monotonic() - sent < 5 + 10, w.output()
        assert w.logged("settlements_unflushed")
    finally:
        if w.alive():
            w.kill9()


async def _started(side: SideTable, n: int) -> bool:
    return len(await side.rows()) >= n
