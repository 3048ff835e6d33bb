"""What the limited claim's fast path costs the database server, per claim statement.

``python -m benchmarks.claim_cost [--jobs N] [--rounds N]`` drains N no-op jobs (20,000)
by claim statements of 20 jobs, each batch then completed by one UPDATE, on fresh
prefixes taking turns: the plain claim, and ``claim_limited_fast`` (limits configured
but not binding: concurrency 10,000, 1,000,000 a second) both as the store runs it now
(planned once per connection, on the claim's sessions: ``-- plan: cached``,
venturi/store/postgres/driver.py's CACHED_PLAN_SETTINGS) and planned at every call with
its parameters (``force_custom_plan``, the store's other statements). It reports the
server CPU time of the claim statements (the backend's ``/proc/PID/schedstat``, so the
server must run on this host), which the machine's other load disturbs far less than
the wall-clock drains of ``python -m benchmarks run --only limits``, and their wall
time as the client sees it (commit included). Medians over rounds.
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
from venturi.store.postgres.driver import CACHED_PLAN_SETTINGS, SESSION_SETTINGS

from .harness import DEFAULT_DSN, fresh_prefix
from .scenarios.worker import fill

LEASE = dt.timedelta(seconds=30)
BATCH = 20


def _cpu_ms(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
        return int(f.read().split()[0]) / 1e6


async def _drain(conn: asyncpg.Connection, pid: int, prefix: str, name: str,
                 kind: str) -> tuple[float, float, float]:
    """(server CPU ms and wall ms per claim statement, wall seconds of the drain)."""
    claim = await conn.prepare(_sql.queries(prefix)[name].sql)
    done = await conn.prepare(
        f"UPDATE {prefix}jobs SET status = 'completed', finished_at = now(),"
        " claimed_by = NULL, claim_expires_at = NULL WHERE id = ANY($1::uuid[])")
    args = (None, [kind], [LEASE], BATCH, 1, 1, "bench/boot")
    cpu, wall, claims, start = 0.0, 0.0, 0, time.perf_counter()
    while True:
        before, sent = _cpu_ms(pid), time.perf_counter()
        got = await claim.fetch(*args)
        wall += time.perf_counter() - sent
        cpu += _cpu_ms(pid) - before
        if not got:
            return cpu / max(claims, 1), 1000 * wall / max(claims, 1), time.perf_counter() - start
        claims += 1
        await done.fetch([r[0] for r in got])


async def main(dsn: str, jobs: int, rounds: int) -> None:
    async with contextlib.AsyncExitStack() as stack:
        prefixes = [await stack.enter_async_context(fresh_prefix(dsn)) for _ in range(3)]
        sessions = {}
        for plan, settings in (("cached", CACHED_PLAN_SETTINGS), ("custom", SESSION_SETTINGS)):
            conn = await asyncpg.connect(dsn, server_settings=dict(settings))
            stack.push_async_callback(conn.close)
            sessions[plan] = (conn, await conn.fetchval("SELECT pg_backend_pid()"))
        contenders = {
            "plain claim (plan cached, as run)": (prefixes[0], "claim", "plain", "cached"),
            "limited fast path, plan cached (as run)":
                (prefixes[1], "claim_limited_fast", "lim", "cached"),
            "limited fast path, planned every call":
                (prefixes[2], "claim_limited_fast", "lim", "custom"),
        }
        admin, _ = sessions["custom"]
        for prefix in prefixes[1:]:
            await admin.execute(
                f"INSERT INTO {prefix}kinds (kind, code_concurrency, code_rate_count,"
                " code_rate_period) VALUES ('lim', 10000, 1000000, interval '1 second')")
        names = list(contenders)
        found: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
        for run in range(rounds):
            for name in names[run % len(names):] + names[:run % len(names)]:
                prefix, statement, kind, plan = contenders[name]
                await admin.execute(f"TRUNCATE {prefix}jobs, {prefix}kind_starts CASCADE")
                await fill(admin, prefix, jobs, kind)
                conn, pid = sessions[plan]
                found[name].append(await _drain(conn, pid, prefix, statement, kind))
    print(f"{jobs:,} jobs, claims of {BATCH}, {rounds} rounds: server CPU and wall time"
          " per claim statement")
    for name, runs in found.items():
        cpu = statistics.median(c for c, _, _ in runs)
        wall = statistics.median(w for _, w, _ in runs)
        print(f"  {name:<40} CPU {cpu:6.3f} ms, wall {wall:6.3f} ms (CPU by round: "
              f"{', '.join(f'{c:.3f}' for c, _, _ in runs)}; drains "
              f"{', '.join(f'{s:.1f}' for _, _, s in runs)} s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.dsn, args.jobs, args.rounds))
