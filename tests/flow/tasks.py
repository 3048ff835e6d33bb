"""Limited tasks for the flow-control process tests, and their side table.

Every run records a ``start`` row (database clock at the start) and, after its work, an
``end`` row. The claims of the rate-limited kind and of the one a pause stops are
recorded as they happen, by a row trigger on the jobs table: a ``claimed`` row at the
claim's database time (a claim sets ``claim_expires_at = claim time + lease``). Read
back from the lease when the job runs instead, a renewal in between (the renewer
extends every held job's lease, however recent) moved claims into later windows: 53 in
one second at 50/s. The side table and its trigger live in the test's prefix and are
dropped with it.
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

LEASE = dt.timedelta(seconds=10)
# Short enough for a test to wait out, long enough that renewal keeps it on a busy
# machine: a renewal has a third of the lease for its round trip and the loop's
# lateness (1 s left 333 ms, which another process booting beside it can eat).
SHORT_LEASE = dt.timedelta(seconds=3)


def side_ddl(prefix: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {prefix}flowside ("
            " seq bigserial PRIMARY KEY, job_id uuid NOT NULL, kind text NOT NULL,"
            " key text, n int, pid int NOT NULL, event text NOT NULL,"
            " at timestamptz NOT NULL);"
            f" CREATE FUNCTION {prefix}flowside_claimed() RETURNS trigger LANGUAGE plpgsql"
            " AS $fn$ BEGIN"
            f" INSERT INTO {prefix}flowside (job_id, kind, key, pid, event, at)"
            " VALUES (NEW.id, NEW.kind, NEW.limit_key, pg_backend_pid(), 'claimed',"
            f" NEW.claim_expires_at - interval '{int(LEASE.total_seconds())} seconds');"
            " RETURN NULL; END $fn$;"
            f" CREATE TRIGGER {prefix}flowside_claimed AFTER UPDATE ON {prefix}jobs"
            " FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status = 'claimed'"
            f" AND NEW.kind IN ('{Rated.kind}', '{Steady.kind}'))"
            f" EXECUTE FUNCTION {prefix}flowside_claimed()")


def side_drop(prefix: str) -> str:
    return (f"DROP TRIGGER IF EXISTS {prefix}flowside_claimed ON {prefix}jobs;"
            f" DROP FUNCTION IF EXISTS {prefix}flowside_claimed();"
            f" DROP TABLE IF EXISTS {prefix}flowside")


@dataclass
class Side:
    pool: asyncpg.Pool
    prefix: str

    async def record(self, ctx: venturi.Context, event: str, key: str | None = None,
                     n: int | None = None) -> None:
        p = self.prefix
        await self.pool.execute(
            f"INSERT INTO {p}flowside (job_id, kind, key, n, pid, event, at)"
            " VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp())",
            ctx.job_id, ctx.kind, key, n, os.getpid(), event)


def side_lifespan(dsn: str, prefix: str) -> Any:
    @asynccontextmanager
    async def lifespan() -> AsyncIterator[Side]:
        pool = await asyncpg.create_pool(dsn, min_size=2, max_size=8)
        try:
            yield Side(pool, prefix)
        finally:
            await pool.close()
    return lifespan


class Capped(venturi.Task, kind="flow.capped", concurrency=5, lease=LEASE):
    """At most five at once, everywhere."""

    seconds: float = 0.05

    async def run(self, ctx: venturi.Context) -> None:
        side: Side = ctx.state
        await side.record(ctx, "start")
        await anyio.sleep(self.seconds)
        await side.record(ctx, "end")


class Keyed(venturi.Task, kind="flow.keyed", concurrency=1, lease=LEASE):
    """One at a time per key, in order."""

    key: str
    n: int
    seconds: float = 0.01

    def limit_key(self) -> str:
        return self.key

    async def run(self, ctx: venturi.Context) -> None:
        side: Side = ctx.state
        await side.record(ctx, "start", self.key, self.n)
        await anyio.sleep(self.seconds)
        await side.record(ctx, "end", self.key, self.n)


class Rated(venturi.Task, kind="flow.rated", rate="50/s", lease=LEASE):
    async def run(self, ctx: venturi.Context) -> None:
        side: Side = ctx.state
        await side.record(ctx, "start")


class Steady(venturi.Task, kind="flow.steady", lease=LEASE):
    """No limits: what a pause stops."""

    seconds: float = 0.05

    async def run(self, ctx: venturi.Context) -> None:
        side: Side = ctx.state
        await side.record(ctx, "start")
        await anyio.sleep(self.seconds)


class Stuck(venturi.Task, kind="flow.stuck", concurrency=3, lease=SHORT_LEASE, max_failures=100):
    """Three at a time; hangs until its process is killed."""

    async def run(self, ctx: venturi.Context) -> None:
        side: Side = ctx.state
        await side.record(ctx, "start")
        await anyio.sleep_forever()


FLOW_TASKS: list[type[venturi.Task]] = [Capped, Keyed, Rated, Steady, Stuck]
