"""Where one-by-one enqueue loses to a raw INSERT: µs per call of each producer path
beside its raw reference, and the difference, in one run.

    python -m benchmarks.enqueue_gap [--dsn DSN] [--jobs 2000] [--rounds 5]
    python -m benchmarks.enqueue_gap --slices [--jobs 5000] [--rounds 5]

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

``--slices`` runs the ``enqueue`` scenario's own four contenders (raw INSERT on one
connection, raw INSERT through an asyncpg pool acquired per job, ``Queue.enqueue``
through its pool, ``Queue.enqueue(conn=...)`` on the raw loop's connection) in slices of
250, in a shuffled order each turn, and shows each contender's slice time by the
contender that ran just before it, and which contender's slice each of the pool path's
plan switches (asyncpg_plans.py) and linger releases (asyncpg_driver.py) fell in: whether
one contender's setup or cleanup is charged to another. As in the paths above, the raw
loops' payloads are encoded beforehand (the scenario encodes them per call: ≈ 1 µs). The
counting wraps the driver's private methods for the run. benchmarks/results-enqueue.md
shows its output.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

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


SLICE_NAMES = ("raw", "raw_pool", "pool", "conn")


async def slices(dsn: str, jobs: int, rounds: int) -> str:
    """The ``enqueue`` scenario's contenders in shuffled turns: a report of µs per call
    by predecessor, and of the pool path's plan switches and releases by slice."""
    tasks = [task(i) for i in range(jobs)]
    texts = [orjson.dumps(payload(i)).decode() for i in range(jobs)]
    current = ["setup"]
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    async with contextlib.AsyncExitStack() as stack:
        vp = await stack.enter_async_context(fresh_prefix(dsn))
        rp = await stack.enter_async_context(fresh_prefix(dsn))
        queue = await stack.enter_async_context(
            Queue.connect(dsn, prefix=vp, min_size=1, max_size=1))
        conn = await asyncpg.connect(dsn)
        stack.push_async_callback(conn.close)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
        stack.push_async_callback(pool.close)
        # Count, by the contender whose slice is running, what the pool path's driver
        # does besides inserting (a diagnostic: the driver's private parts, wrapped).
        # PlanModes has slots: its methods are wrapped on the class, for this run only.
        driver: Any = cast(Any, queue.store).driver
        for owner, name in ((type(driver._plans), "to_generic"),
                            (type(driver._plans), "to_own"), (driver, "_release")):
            def counted(fn: Any, name: str = name) -> Any:
                async def wrapper(*args: Any) -> Any:
                    counts[(current[0], name)] += 1
                    return await fn(*args)
                return wrapper
            stack.callback(setattr, owner, name, getattr(owner, name))
            setattr(owner, name, counted(getattr(owner, name)))
        insert = RAW_APG.format(p=rp)

        async def raw(lo: int, hi: int) -> None:
            for p in texts[lo:hi]:
                await conn.execute(insert, uuid7(), KIND, p, 1, 25)

        async def raw_pool(lo: int, hi: int) -> None:
            for p in texts[lo:hi]:
                async with pool.acquire() as c:
                    await c.execute(insert, uuid7(), KIND, p, 1, 25)

        async def via_pool(lo: int, hi: int) -> None:
            for t in tasks[lo:hi]:
                await queue.enqueue(t)

        async def via_conn(lo: int, hi: int) -> None:
            for t in tasks[lo:hi]:
                await queue.enqueue(t, conn=conn)

        paths: dict[str, Path] = {"raw": raw, "raw_pool": raw_pool, "pool": via_pool,
                                  "conn": via_conn}
        for fn in paths.values():
            await fn(0, min(100, jobs))
        rng = random.Random(7)
        totals: dict[str, list[float]] = {name: [] for name in SLICE_NAMES}
        after: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        slices_run = collections.Counter[str]()
        for _ in range(rounds):
            await truncate(conn, vp, rp)
            spent = dict.fromkeys(SLICE_NAMES, 0.0)
            prev = "truncate"
            for lo in range(0, jobs, STEP):
                hi = min(lo + STEP, jobs)
                order = list(SLICE_NAMES)
                rng.shuffle(order)
                for name in order:
                    current[0] = name
                    start = time.perf_counter()
                    await paths[name](lo, hi)
                    took = time.perf_counter() - start
                    current[0] = "between"
                    spent[name] += took
                    after[(name, prev)].append(took / (hi - lo) * 1e6)
                    slices_run[name] += 1
                    prev = name
            for name in SLICE_NAMES:
                totals[name].append(spent[name] / jobs * 1e6)
    raw_us = statistics.median(totals["raw"])
    lines = ["| contender | µs per call (median of rounds) | raw / contender | "
             + " | ".join(f"slice µs after {p}" for p in SLICE_NAMES) + " |",
             "| --- | ---: | ---: |" + " ---: |" * len(SLICE_NAMES)]
    for name in SLICE_NAMES:
        us = statistics.median(totals[name])
        cells = [f"{statistics.median(v):.1f} (n={len(v)})" if (v := after.get((name, p)))
                 else "" for p in SLICE_NAMES]
        lines.append(f"| {name} | {us:.1f} | {raw_us / us:.1%} | " + " | ".join(cells) + " |")
    lines += ["", "| in the slice of | slices | pool path: to_generic | to_own | linger releases |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for name in (*SLICE_NAMES, "between", "setup"):
        lines.append(f"| {name} | {slices_run[name]} | {counts[(name, 'to_generic')]} "
                     f"| {counts[(name, 'to_own')]} | {counts[(name, '_release')]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DSN)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slices", action="store_true",
                        help="the enqueue scenario's contenders, by predecessor")
    args = parser.parse_args()
    if args.slices:
        print(asyncio.run(slices(args.dsn, args.jobs, args.rounds)))
    else:
        print(report(*asyncio.run(run(args.dsn, args.jobs, args.rounds))))
