"""Fixtures for worker tests on PostgreSQL: a queue on database time, the side
table that test tasks record their runs in, and worker subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

import venturi
from venturi import Queue, Status, Worker
from venturi.store import _connect
from venturi.store.base import ClaimRequest
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .proctasks import side_ddl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pgq(pg_store_dbclock: PostgresStore) -> Queue:
    return Queue(pg_store_dbclock)


class SideTable:
    """What the test tasks recorded: one row per run start (and other events)."""

    def __init__(self, conn: asyncpg.Connection, prefix: str) -> None:
        self.conn = conn
        self.prefix = prefix

    async def rows(self, job_id: UUID | None = None, event: str = "start") -> list[Any]:
        return list(await self.conn.fetch(
            f"SELECT job_id, kind, run_no, pid, at FROM {self.prefix}side"
            " WHERE event = $1 AND ($2::uuid IS NULL OR job_id = $2) ORDER BY seq",
            event, job_id))

    async def runs(self, job_id: UUID) -> list[tuple[int, int]]:
        """(run_no, pid) of each start of ``job_id``, in order."""
        return [(r["run_no"], r["pid"]) for r in await self.rows(job_id)]


@pytest.fixture
async def side(pg_dsn: str, pgq: Queue) -> AsyncIterator[SideTable]:
    # Depends on pgq so that it is torn down (and its table dropped) before the queue's.
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute(side_ddl(pgq.prefix))
    try:
        yield SideTable(conn, pgq.prefix)
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {pgq.prefix}side")
        await conn.close()


class WorkerProcess:
    """One ``python -m tests.worker.proc`` process; output goes to files for diagnosis."""

    def __init__(self, args: list[str], out: Path) -> None:
        self.args = args
        self.out = out
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.err = out.with_suffix(".err")
        with open(out, "wb") as sink, open(self.err, "wb") as errors:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tests.worker.proc", *args], cwd=ROOT, env=env,
                stdout=sink, stderr=errors, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def exited(self) -> bool:
        return self.popen.poll() is not None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def kill9(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def output(self) -> str:
        """The structlog lines (stdout)."""
        return self.out.read_text(errors="replace")

    def errors(self) -> str:
        return self.err.read_text(errors="replace")

    def logged(self, event: str) -> bool:
        return f'"event": "{event}"' in self.output()


@pytest.fixture
def spawn(pg_dsn: str, pgq: Queue, tmp_path: Path) -> Iterator[Any]:
    """``spawn(name=..., concurrency=..., ...)`` starts a worker process on the test's queue;
    every process still alive at teardown is killed (before the tables are dropped)."""
    started: list[WorkerProcess] = []

    def start(**options: Any) -> WorkerProcess:
        args = ["--dsn", pg_dsn, "--prefix", pgq.prefix]
        for key, value in options.items():
            if value is not None:
                args += [f"--{key.replace('_', '-')}", str(value)]
        proc = WorkerProcess(args, tmp_path / f"worker-{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.alive():
            proc.kill9()


async def worker_up(queue: Queue, proc: WorkerProcess) -> bool:
    """True once ``proc`` has booted (its heartbeat row exists); fails fast if it died."""
    if proc.exited():
        raise AssertionError(
            f"worker exited with {proc.returncode}:\n{proc.output()}\n{proc.errors()}")
    return any(w.pid == proc.pid for w in await queue.workers())


LISTEN_NAME = "venturi listen"


async def listen_backends(store: PostgresStore) -> list[int]:
    """The backends of venturi's LISTEN connections on ``store``'s database (an in-process
    worker's waker), by their session name (``named`` in venturi/store/_connect.py). A
    DSN or PGAPPNAME that names every session alike leaves the query text to go by: it
    reads ``LISTEN ...``, the waker's pings included (they LISTEN again)."""
    dsn = store.listen_dsn or store.dsn or ""
    if _connect.named(dsn, "listen") == {"application_name": LISTEN_NAME}:
        where, arg = "application_name = $1", LISTEN_NAME
    else:
        where, arg = "query LIKE $1", f'LISTEN "{store.prefix}%'
    rows = await store.pool.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        f" AND pid <> pg_backend_pid() AND {where} ORDER BY pid", arg)
    return [r["pid"] for r in rows]


async def listen_backend(store: PostgresStore, *, other_than: int | None = None) -> int:
    """The one LISTEN backend of :func:`listen_backends` (not ``other_than``), once there
    is exactly one: a session that ended a moment ago may still be listed."""
    found: list[int] = []

    async def one() -> bool:
        found[:] = await listen_backends(store)
        return len(found) == 1 and found[0] != other_than
    await wait_for(one, what=f"exactly one LISTEN backend (other than {other_than})")
    return found[0]


@asynccontextmanager
async def running(worker: Worker, *, ready: bool = True) -> AsyncIterator[Worker]:
    """Run ``worker`` in the background for the block, then drain it (errors surface here)."""
    task = asyncio.create_task(worker.run())
    try:
        if ready:
            async def up() -> bool:
                if task.done():
                    task.result()  # raises the worker's error
                    raise AssertionError("the worker stopped before it was ready")
                return worker.health.ready
            await wait_for(up, timeout=15, what="the worker to be ready")
        yield worker
    finally:
        if not task.done():
            await asyncio.wait_for(worker.drain(grace=0), 15)
        await asyncio.wait_for(task, 15)


async def take_over(store: PostgresStore, job_id: UUID, claimed_by: str,
                    task: type[venturi.Task]) -> None:
    """Another claimer with the SAME identity takes the job at a new epoch: its lease is
    forced to expire, the reaper's statement recovers it, and a claim takes it again."""
    for _ in range(50):
        await store.pool.execute(
            f"UPDATE {store.prefix}jobs SET claim_expires_at = now() - interval '1 second'"
            " WHERE id = $1 AND status = 'claimed'", job_id)
        await store.recover_stale()
        row = await store.job(job_id)
        assert row is not None
        if row.status is Status.PENDING:
            break  # else a renewal slipped in between: expire it again
    else:
        raise AssertionError("renewals kept winning over the forced expiry")
    jobs = await store.claim(ClaimRequest(claimed_by, {task.__task__.kind: task.__task__.lease},
                                          1))
    assert [j.id for j in jobs] == [job_id]
