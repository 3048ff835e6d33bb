"""Where one-by-one enqueue loses to a raw INSERT: µs per call of each producer path
beside its raw reference, and the difference, in one run.

    python -m benchmarks.enqueue_gap [--dsn DSN] [--jobs 2000] [--rounds 5]

The paths (each in slices of 250 calls, taking turns, every one on its own throwaway
prefix, the tables emptied between rounds) are those of the ``enqueue``,
``conn_enqueue`` and ``sync_enqueue`` scenarios: ``Queue.enqueue`` through its pool
and with ``conn=`` on an asyncpg connection, a psycopg ``AsyncConnection`` and a
SQLAlchemy ``AsyncSession`` on psycopg; ``SyncQueue.enqueue``; and the raw
single-row INSERT loops of asyncpg, psycopg async and psycopg blocking. Figures are
the median over rounds of wall µs and of client CPU µs (``process_time``: the
server's share left out, so less noisy on a shared machine) per call; "over" is the
difference from the path's raw reference, the part of a call that profiles
(``benchmarks.profile_producers``) can explain. benchmarks/results-producers.md shows its output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import orjson
import psycopg
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from venturi import Queue, SyncQueue
from venturi._ids import uuid7

from .harness import fresh_prefix, truncate
from .scenarios.enqueue import RAW_ONE as RAW_APG
from .scenarios.producers import RAW_ONE as RAW_PG
from .scenarios.producers import sa_url
from .tasks import KIND, payload, task

DSN = "postgresql://root@127.0.0.1:5432/test"
STEP = 250
# Each path and the raw reference it is compared with.
REFERENCE = {
    "Queue.enqueue (pool)": "raw asyncpg",
    "conn=<asyncpg>": "raw asyncpg",
    "conn=<psycopg async>": "raw psycopg async",
    "conn=<AsyncSession+psycopg>": "raw psycopg async",
    "SyncQueue.enqueue": "raw psycopg",
}

Path = Callable[[int, int], Awaitable[None]]


async def run(dsn: str, jobs: int, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall µs and median client CPU µs per call, by path."""
    tasks = [task(i) for i in range(jobs)]
    texts = [orjson.dumps(payload(i)).decode() for i in range(jobs)]
    names = ["raw asyncpg", "raw psycopg async", "raw psycopg", *REFERENCE]
    async with contextlib.AsyncExitStack() as stack:
        entered = {name: await stack.enter_async_context(fresh_prefix(dsn)) for name in names}
        apg = await asyncpg.connect(dsn)
        stack.push_async_callback(apg.close)
        pg_async = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        stack.push_async_callback(pg_async.close)
        pg = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        engine = create_async_engine(sa_url(dsn, "psycopg"), pool_size=1,
                                     isolation_level="AUTOCOMMIT")
        stack.push_async_callback(engine.dispose)
        pool_q, apg_q, pga_q, sa_q = [await stack.enter_async_context(Queue.connect(
            dsn, prefix=entered[name], min_size=1, max_size=1))
            for name in REFERENCE if name != "SyncQueue.enqueue"]
        sync_q = stack.enter_context(SyncQueue.connect(
            dsn, prefix=entered["SyncQueue.enqueue"], min_size=1, max_size=1))
        session = AsyncSession(engine)
        raw_apg = RAW_APG.format(p=entered["raw asyncpg"])
        raw_pga = RAW_PG.format(p=entered["raw psycopg async"])
        raw_pg = RAW_PG.format(p=entered["raw psycopg"])

        async def r_apg(lo: int, hi: int) -> None:
            for p in texts[lo:hi]:
                await apg.execute(raw_apg, uuid7(), KIND, p, 1, 25)

        async def r_pga(lo: int, hi: int) -> None:
            for p in texts[lo:hi]:
                await pg_async.execute(raw_pga, (uuid7(), KIND, p, 1, 25))

        async def r_pg(lo: int, hi: int) -> None:
            for p in texts[lo:hi]:
                pg.execute(raw_pg, (uuid7(), KIND, p, 1, 25))

        def on(queue: Queue, conn: Any) -> Path:
            async def path(lo: int, hi: int) -> None:
                for t in tasks[lo:hi]:
                    await queue.enqueue(t, conn=conn)
            return path

        async def sync(lo: int, hi: int) -> None:
            for t in tasks[lo:hi]:
                sync_q.enqueue(t)

        paths: dict[str, Path] = {
            "raw asyncpg": r_apg, "raw psycopg async": r_pga, "raw psycopg": r_pg,
            "Queue.enqueue (pool)": on(pool_q, None), "conn=<asyncpg>": on(apg_q, apg),
            "conn=<psycopg async>": on(pga_q, pg_async),
            "conn=<AsyncSession+psycopg>": on(sa_q, session),
            "SyncQueue.enqueue": sync,
        }
        for fn in paths.values():
            await fn(0, min(200, jobs))
        per_round: dict[str, list[float]] = {name: [] for name in names}
        cpu_round: dict[str, list[float]] = {name: [] for name in names}
        turn = 0
        for _ in range(rounds):
            await truncate(apg, *entered.values())
            spent = dict.fromkeys(names, 0.0)
            cpu = dict.fromkeys(names, 0.0)
            for lo in range(0, jobs, STEP):
                turn += 1
                for name in names[turn % len(names):] + names[:turn % len(names)]:
                    start, start_cpu = time.perf_counter(), time.process_time()
                    await paths[name](lo, min(lo + STEP, jobs))
                    spent[name] += time.perf_counter() - start
                    cpu[name] += time.process_time() - start_cpu
            for name in names:
                per_round[name].append(spent[name] / jobs * 1e6)
                cpu_round[name].append(cpu[name] / jobs * 1e6)
        await session.close()
    return ({name: statistics.median(v) for name, v in per_round.items()},
            {name: statistics.median(v) for name, v in cpu_round.items()})


def report(us: dict[str, float], cpu: dict[str, float]) -> str:
    lines = ["| path | µs per call | client CPU µs | raw reference | over raw (µs) "
             "| CPU over raw (µs) | raw / path |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for name in ("raw asyncpg", "raw psycopg async", "raw psycopg"):
        lines.append(f"| {name} | {us[name]:.1f} | {cpu[name]:.1f} | | | | |")
    for name, ref in REFERENCE.items():
        lines.append(f"| {name} | {us[name]:.1f} | {cpu[name]:.1f} | {ref} "
                     f"| {us[name] - us[ref]:+.1f} | {cpu[name] - cpu[ref]:+.1f} "
                     f"| {us[ref] / us[name]:.1%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DSN)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(report(*asyncio.run(run(args.dsn, args.jobs, args.rounds))))
