"""Tasks run by worker processes on the test hosts (``venturi worker --app tests.hosts.tasks``
or ``python -m tests.hosts.worker``).

Every run records its start (and its end) in a file of its own process under
``VENTURI_HOSTS_RECORDS``, before anything else: a file works while the host is cut off
from the database, so the record of what ran where is exact even for runs that the
partition interrupted. The clock-skew tasks also record in the database (``side_ddl``,
the table named by ``VENTURI_HOSTS_SIDE_TABLE`` over ``VENTURI_HOSTS_SIDE_DSN``), where
``clock_timestamp()`` dates each event in database time.

The skew tasks come in one class per host suffix (``SKEW_HOSTS``), so that each skewed
worker alone runs its own kinds (``--kinds``) and no well-timed worker can hide its
mistakes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random
import time
from pathlib import Path
from typing import Any

import anyio
import asyncpg

import venturi

RECORDS = "VENTURI_HOSTS_RECORDS"
HOST = "VENTURI_HOSTS_HOST"
SIDE_DSN = "VENTURI_HOSTS_SIDE_DSN"
SIDE_TABLE = "VENTURI_HOSTS_SIDE_TABLE"
QUICK_RETRY = dt.timedelta(milliseconds=200)
WORK_LEASE = dt.timedelta(seconds=2)
SLOW_SECONDS = 4.0  # longer than WORK_LEASE: a slow run in flight at a cut is cancelled
SKEW_HOSTS = ("ahead", "behind")
SKEW_BACKOFF = dt.timedelta(seconds=3)
SKEW_EVERY = dt.timedelta(seconds=2)
SKEW_CRON = "* * * * * */3"  # every third second (croniter's sixth field)
# Renewal has a third of a lease for its round trip and the loop's lateness, on hosts
# sharing a busy machine: 1 s of it here (a 1.5 s lease left 500 ms).
SKEW_LEASE = dt.timedelta(seconds=3)
SKEW_TIMEOUT = dt.timedelta(seconds=1)

_record_file: Any = None


def record(ctx: venturi.Context, event: str, slow: bool = False) -> None:
    """One line per event, written through at once: ``event job_id run_no host pid
    monotonic slow`` (CLOCK_MONOTONIC is one clock for every process of the machine)."""
    global _record_file
    if _record_file is None:
        path = Path(os.environ[RECORDS]) / f"{os.environ.get(HOST, 'host')}-{os.getpid()}.runs"
        _record_file = open(path, "a", buffering=1)  # noqa: SIM115 - for the process's life
    _record_file.write(f"{event} {ctx.job_id} {ctx.run_no} {os.environ.get(HOST, '-')}"
                       f" {os.getpid()} {time.monotonic():.6f} {int(slow)}\n")


class Work(venturi.Task, kind="hosts.work", lease=WORK_LEASE, max_failures=1000):
    """Thousands of these: quick, except the ``slow`` ones, which outlast a lease."""

    n: int
    slow: bool = False

    def backoff(self, failures: int) -> dt.timedelta:
        return QUICK_RETRY  # the faults are injected: real backoff would only slow the run

    async def run(self, ctx: venturi.Context) -> None:
        record(ctx, "start", self.slow)
        await anyio.sleep(SLOW_SECONDS if self.slow else random.uniform(0, 0.02))
        record(ctx, "end", self.slow)


# --- clock skew -------------------------------------------------------------------------

def side_ddl(table: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {table} ("
            " seq bigserial PRIMARY KEY, job_id uuid NOT NULL, kind text NOT NULL,"
            " run_no int NOT NULL, event text NOT NULL,"
            " at timestamptz NOT NULL DEFAULT clock_timestamp())")


_pool: asyncpg.Pool | None = None
_pool_lock = asyncio.Lock()


async def side(ctx: venturi.Context, event: str) -> None:
    global _pool
    async with _pool_lock:
        if _pool is None:
            _pool = await asyncpg.create_pool(os.environ[SIDE_DSN], min_size=1, max_size=2)
    await _pool.execute(f"INSERT INTO {os.environ[SIDE_TABLE]} (job_id, kind, run_no, event)"
                        " VALUES ($1, $2, $3, $4)", ctx.job_id, ctx.kind, ctx.run_no, event)


def _skew_tasks(host: str) -> list[type[venturi.Task]]:
    class Delayed(venturi.Task, kind=f"skew.{host}.delayed"):
        """Enqueued with a delay: must start when it becomes visible in database time."""

        async def run(self, ctx: venturi.Context) -> None:
            await side(ctx, "start")

    class Flaky(venturi.Task, kind=f"skew.{host}.flaky"):
        """Fails its first run; the retry must start after its backoff, in database time."""

        def backoff(self, failures: int) -> dt.timedelta:
            return SKEW_BACKOFF

        async def run(self, ctx: venturi.Context) -> None:
            await side(ctx, "start")
            if ctx.run_no == 1:
                raise RuntimeError("first run fails")

    class Leased(venturi.Task, kind=f"skew.{host}.leased", lease=SKEW_LEASE):
        """Runs for several leases: renewals must keep it, in database time."""

        seconds: float = 8.0

        async def run(self, ctx: venturi.Context) -> None:
            await side(ctx, "start")
            await anyio.sleep(self.seconds)
            await side(ctx, "end")

    class Timed(venturi.Task, kind=f"skew.{host}.timed", timeout=SKEW_TIMEOUT):
        """Hangs in its first run, past its timeout; then completes."""

        def backoff(self, failures: int) -> dt.timedelta:
            return dt.timedelta(0)

        async def run(self, ctx: venturi.Context) -> None:
            await side(ctx, "start")
            if ctx.run_no == 1:
                await anyio.sleep(60)

    class Tick(venturi.Task, kind=f"skew.{host}.tick", every=SKEW_EVERY):
        async def run(self, ctx: venturi.Context) -> None:
            await side(ctx, "start")

    class Cron(venturi.Task, kind=f"skew.{host}.cron", cron=SKEW_CRON):
        async def run(self, ctx: venturi.Context) -> None:
            await side(ctx, "start")

    return [Delayed, Flaky, Leased, Timed, Tick, Cron]


SKEW_TASKS = {host: _skew_tasks(host) for host in SKEW_HOSTS}
Delayed_ahead, Flaky_ahead, Leased_ahead, Timed_ahead, Tick_ahead, Cron_ahead = SKEW_TASKS["ahead"]
(Delayed_behind, Flaky_behind, Leased_behind, Timed_behind, Tick_behind,
 Cron_behind) = SKEW_TASKS["behind"]


def skew_kinds(host: str) -> list[str]:
    return [cls.__task__.kind for cls in SKEW_TASKS[host]]
