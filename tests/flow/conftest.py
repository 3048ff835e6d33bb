"""Fixtures for the flow-control process tests: the side table and worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from venturi import Queue
from venturi.store.postgres import PostgresStore

from .tasks import side_ddl, side_drop

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pgq(pg_store_dbclock: PostgresStore) -> Queue:
    return Queue(pg_store_dbclock)


class FlowSide:
    def __init__(self, conn: asyncpg.Connection, prefix: str) -> None:
        self.conn = conn
        self.prefix = prefix

    async def rows(self, event: str, kind: str) -> list[Any]:
        return list(await self.conn.fetch(
            f"SELECT job_id, key, n, pid, at FROM {self.prefix}flowside"
            " WHERE event = $1 AND kind = $2 ORDER BY at, seq", event, kind))

    async def count(self, event: str, kind: str) -> int:
        n: int = await self.conn.fetchval(
            f"SELECT count(*) FROM {self.prefix}flowside WHERE event = $1 AND kind = $2",
            event, kind)
        return n


@pytest.fixture
async def side(pg_dsn: str, pgq: Queue) -> AsyncIterator[FlowSide]:
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute(side_ddl(pgq.prefix))
    try:
        yield FlowSide(conn, pgq.prefix)
    finally:
        await conn.execute(side_drop(pgq.prefix))
        await conn.close()


class FlowWorker:
    def __init__(self, args: list[str], out: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.out = out
        with open(out, "wb") as sink:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tests.flow.proc", *args], cwd=ROOT, env=env,
                stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> bool:
        return self.popen.poll() is not None

    def kill9(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)


@pytest.fixture
def spawn(pg_dsn: str, pgq: Queue, tmp_path: Path) -> Iterator[Any]:
    started: list[FlowWorker] = []

    def start(concurrency: int = 20) -> FlowWorker:
        proc = FlowWorker(["--dsn", pg_dsn, "--prefix", pgq.prefix,
                           "--concurrency", str(concurrency)],
                          tmp_path / f"flow-worker-{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if not proc.exited():
            proc.kill9()


async def workers_up(queue: Queue, procs: list[FlowWorker]) -> bool:
    for proc in procs:
        if proc.exited():
            raise AssertionError(f"worker exited:\n{proc.out.read_text(errors='replace')}")
    pids = {w.pid for w in await queue.workers()}
    return all(p.pid in pids for p in procs)
