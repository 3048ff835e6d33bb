"""Tasks run by real ``venturi worker`` processes (``--app tests.chaos.tasks``) in the
fault-injection run, the CLI outage test, the soak and the pooler benchmark.

The CLI has no lifespan hook, so ``Step`` opens its side-table pool lazily from
the environment: ``VENTURI_CHAOS_SIDE_DSN`` (a DSN; tag it with
``?application_name=...`` to tell its backends apart) and
``VENTURI_CHAOS_SIDE_TABLE`` (the table ``side_ddl`` made).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random

import anyio
import asyncpg

import venturi

SIDE_DSN = "VENTURI_CHAOS_SIDE_DSN"
SIDE_TABLE = "VENTURI_CHAOS_SIDE_TABLE"
QUICK_RETRY = dt.timedelta(milliseconds=200)


def side_ddl(table: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {table} ("
            " seq bigserial PRIMARY KEY, job_id uuid NOT NULL, run_no int NOT NULL,"
            " pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())")


_pool: asyncpg.Pool | None = None
_pool_lock = asyncio.Lock()


async def _side_pool() -> asyncpg.Pool:
    global _pool
    async with _pool_lock:
        if _pool is None:
            _pool = await asyncpg.create_pool(os.environ[SIDE_DSN], min_size=1, max_size=4,
                                              timeout=5)
        return _pool


class Step(venturi.Task, kind="chaos.step", lease=dt.timedelta(seconds=2), max_failures=1000):
    """Records its execution (job, run number, pid) before sleeping 0-50 ms, so that a
    kill lands mid-job. A failed record fails the run: the job is retried, and every
    completed run is one the side table saw."""

    n: int
    until_file: str = ""  # then waits until this file exists: the test holds the step back

    def backoff(self, failures: int) -> dt.timedelta:
        return QUICK_RETRY  # the faults are injected; waiting out real backoff only slows the run

    async def run(self, ctx: venturi.Context) -> None:
        pool = await _side_pool()
        await pool.execute(
            f"INSERT INTO {os.environ[SIDE_TABLE]} (job_id, run_no, pid) VALUES ($1, $2, $3)",
            ctx.job_id, ctx.run_no, os.getpid())
        await anyio.sleep(random.uniform(0, 0.05))
        # Another process makes the file: there is no event to wait on.
        while self.until_file and not await anyio.Path(self.until_file).exists():  # noqa: ASYNC110
            await anyio.sleep(0.02)


class Slow(venturi.Task, kind="chaos.slow"):
    """Marks its start and end as files in ``marks`` (they work while the database is down)."""

    seconds: float
    marks: str

    async def run(self, ctx: venturi.Context) -> None:
        await anyio.Path(self.marks, f"{ctx.job_id}.{ctx.run_no}.start").touch()
        await anyio.sleep(self.seconds)
        await anyio.Path(self.marks, f"{ctx.job_id}.{ctx.run_no}.end").touch()


class Parked(venturi.Task, kind="chaos.parked", lease=dt.timedelta(seconds=60)):
    """Runs until cancelled, marking its start; a 60 s lease keeps renewal 20 s away."""

    marks: str

    async def run(self, ctx: venturi.Context) -> None:
        await anyio.Path(self.marks, f"{ctx.job_id}.start").touch()
        await anyio.sleep_forever()


class Noop(venturi.Task, kind="chaos.noop"):
    """Throughput work: the queue's own cost and nothing else."""

    n: int

    async def run(self, ctx: venturi.Context) -> None:
        return None
