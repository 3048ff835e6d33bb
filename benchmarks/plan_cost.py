"""What planning every execution costs the hot statements (docs/operations/maintenance.md,
"Plans that outlive the table they were made for").

    python -m benchmarks.plan_cost --dsn postgresql://127.0.0.1/test [--rounds 2000]

Two stores on one fresh prefix, taking turns call by call: venturi's default
(``plan_cache_mode = force_custom_plan`` on its pool) and PostgreSQL's (the DSN's
``?plan_cache_mode=auto``), each on a one-connection pool. The table holds 20,000 finished
jobs and is ANALYZEd first, so that the generic plans PostgreSQL caches in ``auto`` mode
are the good ones: what is left between the two is the planning. Each round enqueues ten
jobs one at a time, claims a batch of one and one of ten (with the reserved slots a worker
asks for) and settles them; the medians per call are printed, and the server's own
planning time of one claim (``EXPLAIN (ANALYZE, SUMMARY)``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

import venturi
from venturi.store.base import Action, ClaimRequest, Settlement
from venturi.store.postgres import PostgresStore

from .harness import drop_statements


class Nop(venturi.Task, kind="plancost.nop"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


LEASES = {"plancost.nop": dt.timedelta(seconds=30)}


async def _timed(into: list[float], call: Callable[[], Awaitable[Any]]) -> Any:
    began = time.perf_counter()
    result = await call()
    into.append((time.perf_counter() - began) * 1e6)
    return result


async def plan_cost(dsn: str, rounds: int) -> dict[str, dict[str, float]]:
    prefix = f"plancost{secrets.token_hex(3)}_"
    admin = await asyncpg.connect(dsn)
    auto_dsn = f"{dsn}{'&' if '?' in dsn else '?'}plan_cache_mode=auto"
    stores = {
        "force_custom_plan": await PostgresStore.connect(dsn, prefix=prefix, max_size=1),
        "auto": await PostgresStore.connect(auto_dsn, prefix=prefix, max_size=1),
        # The zero-cost alternative: generic plans, with sequential scans priced out.
        "auto, enable_seqscan=off": await PostgresStore.connect(
            f"{auto_dsn}&enable_seqscan=off", prefix=prefix, max_size=1),
    }
    times: dict[str, dict[str, list[float]]] = {
        m: {"enqueue": [], "claim 1": [], "claim 10": [], "settle 11": []} for m in stores}
    try:
        await stores["auto"].migrate()
        await admin.execute(
            f"INSERT INTO {prefix}jobs (id, kind, payload, status, finished_at, run_count)"
            " SELECT gen_random_uuid(), 'plancost.nop', '{}', 'completed', now(), 1"
            " FROM generate_series(1, 20000)")
        await admin.execute(f"ANALYZE {prefix}jobs")
        queues = {m: venturi.Queue(s) for m, s in stores.items()}
        for _ in range(rounds):
            for mode, store in stores.items():
                t = times[mode]
                for _ in range(10):
                    await _timed(t["enqueue"], lambda q=queues[mode]: q.enqueue(Nop()))
                claimed_by = f"{mode}/1"
                one = await _timed(t["claim 1"], lambda s=store, c=claimed_by: s.claim(
                    ClaimRequest(c, LEASES, 1)))
                ten = await _timed(t["claim 10"], lambda s=store, c=claimed_by: s.claim(
                    ClaimRequest(c, LEASES, 10, reserve_normal=1, reserve_low=1)))
                done = [Settlement(j.id, j.run_count, Action.COMPLETE) for j in [*one, *ten]]
                await _timed(t["settle 11"],
                             lambda s=store, c=claimed_by, d=done: s.settle_many(c, d))
        async with stores["force_custom_plan"].pool.acquire() as c:
            await c.execute(f"INSERT INTO {prefix}jobs (id, kind, payload) SELECT"
                            " gen_random_uuid(), 'plancost.nop', '{}' FROM generate_series(1, 50)")
            sql = stores["force_custom_plan"]._q["claim"].sql
            tx = c.transaction()
            await tx.start()
            (plan,) = json.loads(await c.fetchval(
                f"EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) {sql}", None, ["plancost.nop"],
                [dt.timedelta(seconds=30)], 10, 1, 1, "explain/1"))
            await tx.rollback()
        out = {m: {k: statistics.median(v) for k, v in t.items()} for m, t in times.items()}
        out["server"] = {"claim planning ms": plan["Planning Time"],
                         "claim execution ms": plan["Execution Time"]}
        return out
    finally:
        for s in stores.values():
            await s.close()
        for statement in drop_statements(prefix):
            await admin.execute(statement)
        await admin.close()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.plan_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", default="postgresql://127.0.0.1/test")
    p.add_argument("--rounds", type=int, default=1000)
    args = p.parse_args(argv)
    result = asyncio.run(plan_cost(args.dsn, args.rounds))
    calls = list(result["auto"])
    print("| call (median µs) | force_custom_plan (venturi) | auto (PostgreSQL's default) |"
          " difference | auto, enable_seqscan=off |")
    print("|---|---:|---:|---:|---:|")
    for call in calls:
        a, f = result["auto"][call], result["force_custom_plan"][call]
        z = result["auto, enable_seqscan=off"][call]
        print(f"| {call} | {f:.0f} | {a:.0f} | {f - a:+.0f} ({(f - a) / a:+.0%}) | {z:.0f} |")
    print(f"\nOne claim of 10 with its parameters (EXPLAIN ANALYZE): planning"
          f" {result['server']['claim planning ms']:.3f} ms, execution"
          f" {result['server']['claim execution ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
