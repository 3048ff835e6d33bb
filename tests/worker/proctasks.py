"""Tasks for worker-process tests, and the side table they record executions in.

Every run writes a row to ``{prefix}side`` (job, run number, pid, event) before
it does anything else, so a test can see what ran where even when the process
that ran it was killed a moment later. The side table lives in the test's own
prefix and is dropped with it.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import asyncpg

import venturi

POISON_EXIT = 17


def side_ddl(prefix: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {prefix}side ("
            " seq bigserial PRIMARY KEY, job_id uuid NOT NULL, kind text NOT NULL,"
            " run_no int NOT NULL, pid int NOT NULL, event text NOT NULL,"
            " at timestamptz NOT NULL DEFAULT clock_timestamp())")


@dataclass
class Side:
    pool: asyncpg.Pool
    prefix: str

    async def record(self, ctx: venturi.Context, event: str = "start") -> None:
        await self.pool.execute(
            f"INSERT INTO {self.prefix}side (job_id, kind, run_no, pid, event)"
            " VALUES ($1, $2, $3, $4, $5)", ctx.job_id, ctx.kind, ctx.run_no, os.getpid(), event)


def side_lifespan(dsn: str, prefix: str) -> Any:
    @asynccontextmanager
    async def lifespan() -> AsyncIterator[Side]:
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
        try:
            yield Side(pool, prefix)
        finally:
            await pool.close()
    return lifespan


async def record(ctx: venturi.Context, event: str = "start") -> None:
    side: Side = ctx.state
    await side.record(ctx, event)


class Hang(venturi.Task, kind="proc.hang", lease=dt.timedelta(seconds=1)):
    """Hangs in its first ``hang_runs`` runs (until its process is killed), then completes."""

    hang_runs: int = 1

    async def run(self, ctx: venturi.Context) -> str:
        await record(ctx)
        if ctx.run_no <= self.hang_runs:
            ctx.carry = {"unsaved": ctx.run_no}  # lost with the process (rule 7)
            await anyio.sleep_forever()
        return "done"


class Poison(venturi.Task, kind="proc.poison", lease=dt.timedelta(seconds=1), max_failures=3):
    """Kills its own process on every run."""

    async def run(self, ctx: venturi.Context) -> None:
        await record(ctx)
        os._exit(POISON_EXIT)


class Long(venturi.Task, kind="proc.long", lease=dt.timedelta(seconds=30)):
    """Runs longer than any test waits; the long lease keeps the reaper out of the picture."""

    seconds: float = 120.0
    end_dir: str = ""  # record the end as a file there: it works while the database is down
    until_file: str = ""  # end once this file exists (within ``seconds``): the test says when

    async def run(self, ctx: venturi.Context) -> None:
        await record(ctx)
        with anyio.move_on_after(self.seconds):
            if self.until_file:
                # The test's process makes the file: there is no event to wait on.
                while not await anyio.Path(self.until_file).exists():  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            else:
                await anyio.sleep_forever()
        if self.end_dir:
            await anyio.Path(self.end_dir, f"{ctx.job_id}.end").touch()
        else:
            await record(ctx, "end")


class Quick(venturi.Task, kind="proc.quick"):
    async def run(self, ctx: venturi.Context) -> None:
        await record(ctx)


PROC_TASKS: list[type[venturi.Task]] = [Hang, Poison, Long, Quick]
