"""What the limited claim's fast path costs the database server, per claim statement.

``python -m benchmarks.claim_cost [--jobs N] [--rounds N]`` drains N no-op jobs (20,000)
by claim statements of 20 jobs, each batch then completed by one UPDATE, on four fresh
prefixes taking turns: the plain claim and ``claim_limited_fast`` (limits configured but
not binding: concurrency 10,000, 1,000,000 a second), each with the index of claimed
jobs by kind (sql/0007_claimed_kinds.sql) and with it dropped. It reports the server
CPU time of the claim statements (the backend's ``/proc/PID/schedstat``, so the server
must run on this host), which the machine's other load disturbs far less than the
wall-clock drains of ``python -m benchmarks run --only limits``. Medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import statistics
import time

import asyncpg

from venturi.store import _sql

from .harness import DEFAULT_DSN, fresh_prefix
from .scenarios.worker import fill

LEASE = dt.timedelta(seconds=30)
BATCH = 20


def _cpu_ms(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
        return int(f.read().split()[0]) / 1e6


async def _drain(conn: asyncpg.Connection, pid: int, prefix: str, name: str,
                 kind: str) -> tuple[float, float]:
    """(server CPU ms per claim statement, wall seconds of the drain)."""
    claim = await conn.prepare(_sql.queries(prefix)[name].sql)
    done = await conn.prepare(
        f"UPDATE {prefix}jobs SET status = 'completed', finished_at = now(),"
        " claimed_by = NULL, claim_expires_at = NULL WHERE id = ANY($1::uuid[])")
    args = (None, [kind], [LEASE], BATCH, 1, 1, "bench/boot")
    cpu, claims, start = 0.0, 0, time.perf_counter()
    while True:
        before = _cpu_ms(pid)
        got = await claim.fetch(*args)
        cpu += _cpu_ms(pid) - before
        if not got:
            return cpu / max(claims, 1), time.perf_counter() - start
        claims += 1
        await done.fetch([r[0] for r in got])


async def main(dsn: str, jobs: int, rounds: int) -> None:
    async with contextlib.AsyncExitStack() as stack:
        prefixes = [await stack.enter_async_context(fresh_prefix(dsn)) for _ in range(4)]
        # The claims run as the store runs them: a custom plan per call.
        conn = await asyncpg.connect(dsn, server_settings={"plan_cache_mode": "force_custom_plan"})
        stack.push_async_callback(conn.close)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        contenders = {
            "plain claim, with jobs_claimed_kind": (prefixes[0], "claim", "plain"),
            "plain claim, without": (prefixes[1], "claim", "plain"),
            "limited fast path, with jobs_claimed_kind": (prefixes[2], "claim_limited_fast", "lim"),
            "limited fast path, without": (prefixes[3], "claim_limited_fast", "lim"),
        }
        for prefix in prefixes[2:]:
            await conn.execute(
                f"INSERT INTO {prefix}kinds (kind, code_concurrency, code_rate_count,"
                " code_rate_period) VALUES ('lim', 10000, 1000000, interval '1 second')")
        for prefix in prefixes[1::2]:
            await conn.execute(f"DROP INDEX {prefix}jobs_claimed_kind")
        names = list(contenders)
        found: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        for run in range(rounds):
            for name in names[run % 4:] + names[:run % 4]:
                prefix, statement, kind = contenders[name]
                await conn.execute(f"TRUNCATE {prefix}jobs, {prefix}kind_starts CASCADE")
                await fill(conn, prefix, jobs, kind)
                found[name].append(await _drain(conn, pid, prefix, statement, kind))
    print(f"{jobs:,} jobs, claims of {BATCH}, {rounds} rounds: server CPU per claim statement")
    for name, runs in found.items():
        cpu = statistics.median(c for c, _ in runs)
        print(f"  {name:<44} {cpu:6.3f} ms (rounds: "
              f"{', '.join(f'{c:.3f}' for c, _ in runs)}; drains "
              f"{', '.join(f'{s:.1f}' for _, s in runs)} s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.dsn, args.jobs, args.rounds))
