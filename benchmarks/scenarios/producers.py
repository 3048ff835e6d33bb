"""Producer scenarios beyond asyncpg: SyncQueue on psycopg, and ``conn=`` on a psycopg
``AsyncConnection`` and on SQLAlchemy ``AsyncSession``s.

Each venturi figure sits beside the raw references of its own driver, measured in
the same run on rows of the same shape (same ids, payload JSON, kind, priority,
failure budget) in a second prefix migrated with the same schema, as in
``enqueue.py``: the raw loops generate the id, encode the payload, and send a
plain INSERT (or COPY) with no validation and no NOTIFY.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import orjson
import psycopg
import psycopg_pool
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from venturi import Queue, SyncQueue
from venturi._ids import uuid7

from ..harness import Bench, Figure, measure, scenario
from ..tasks import KIND, payload, task
from .enqueue import COLUMNS
from .enqueue import RAW_ONE as RAW_ONE_ASYNCPG

RAW_ONE = ("INSERT INTO {p}jobs (id, kind, payload, priority, max_failures) "
           "VALUES (%s, %s, %s::jsonb, %s, %s)")


def _blocking(fn: Callable[[int, int], None]) -> Callable[[int, int], Awaitable[None]]:
    """A blocking contender as the harness calls one (it runs in the harness's loop
    thread, blocking it, as a WSGI worker thread would block)."""

    async def call(lo: int, hi: int) -> None:
        fn(lo, hi)

    return call


def sa_url(dsn: str, driver: str) -> str:
    return f"postgresql+{driver}://{dsn.split('://', 1)[1]}"


@scenario("sync_enqueue", "SyncQueue.enqueue, one job per call (psycopg)")
async def sync_enqueue(bench: Bench) -> None:
    """`SyncQueue.enqueue` N times in a loop through its psycopg pool, against a raw
    loop of single-row INSERTs through psycopg 3 `execute` on one held connection in
    autocommit mode, and through a psycopg_pool pool taken per job (what a WSGI
    handler does). One commit per job."""
    n = bench.size.one_by_one
    tasks = [task(i) for i in range(n)]
    payloads = [payload(i) for i in range(n)]
    async with bench.fresh_prefix() as vp, bench.fresh_prefix() as rp:
        control = await asyncpg.connect(bench.dsn)
        conn = psycopg.connect(bench.dsn, autocommit=True)
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            bench.dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True)
        try:
            with SyncQueue.connect(bench.dsn, prefix=vp, min_size=1, max_size=1) as queue:
                insert = RAW_ONE.format(p=rp)

                def raw(lo: int, hi: int) -> None:
                    for p in payloads[lo:hi]:
                        conn.execute(insert, (uuid7(), KIND, orjson.dumps(p).decode(), 1, 25))

                def raw_pool(lo: int, hi: int) -> None:
                    for p in payloads[lo:hi]:
                        with pool.connection() as c:
                            c.execute(insert, (uuid7(), KIND, orjson.dumps(p).decode(), 1, 25))

                def via_pool(lo: int, hi: int) -> None:
                    for t in tasks[lo:hi]:
                        queue.enqueue(t)

                secs = await measure(bench, control, (vp, rp), n, {
                    "raw": _blocking(raw), "raw_pool": _blocking(raw_pool),
                    "pool": _blocking(via_pool),
                }, step=250)
        finally:
            pool.close()
            conn.close()
            await control.close()
    ref, ref_pool = "raw psycopg single-row INSERT", "raw psycopg single-row INSERT via pool"
    bench.record(Figure(bench.scenario, ref, n, secs["raw"], raw=True,
                        note="on one connection, autocommit"))
    bench.record(Figure(bench.scenario, ref_pool, n, secs["raw_pool"], raw=True,
                        note="a psycopg_pool pool, taken per job"))
    bench.record(Figure(bench.scenario, "SyncQueue.enqueue", n, secs["pool"], (ref, ref_pool),
                        note="through venturi's psycopg pool"))


@scenario("sync_enqueue_many", "SyncQueue.enqueue_many, batches (psycopg)")
async def sync_enqueue_many(bench: Bench) -> None:
    """`SyncQueue.enqueue_many` in batches of 1,000, against psycopg 3's own bulk paths
    for the same rows in the same batches: `executemany` of the single-row INSERT
    (pipelined) and `COPY ... FROM STDIN` with `write_row`. Each batch is one call
    and one transaction."""
    size = bench.size
    batch, count = size.batch, size.batches
    total = batch * count
    tasks = [task(i) for i in range(total)]
    payloads = [payload(i) for i in range(total)]
    async with bench.fresh_prefix() as vp, bench.fresh_prefix() as rp:
        control = await asyncpg.connect(bench.dsn)
        conn = psycopg.connect(bench.dsn)
        try:
            with SyncQueue.connect(bench.dsn, prefix=vp, min_size=1, max_size=1) as queue:
                insert = RAW_ONE.format(p=rp)
                copy_sql = f"COPY {rp}jobs ({', '.join(COLUMNS)}) FROM STDIN"

                def raw_many(lo: int, hi: int) -> None:
                    for start in range(lo, hi, batch):
                        with conn.transaction(), conn.cursor() as cur:
                            cur.executemany(insert, [
                                (uuid7(), KIND, orjson.dumps(p).decode(), 1, 25)
                                for p in payloads[start:min(start + batch, hi)]])

                def raw_copy(lo: int, hi: int) -> None:
                    for start in range(lo, hi, batch):
                        with conn.transaction(), conn.cursor() as cur, \
                                cur.copy(copy_sql) as copy:
                            for p in payloads[start:min(start + batch, hi)]:
                                copy.write_row((uuid7(), KIND, orjson.dumps(p).decode(), 1, 25))

                def venturi(lo: int, hi: int) -> None:
                    for start in range(lo, hi, batch):
                        queue.enqueue_many(tasks[start:min(start + batch, hi)])

                secs = await measure(bench, control, (vp, rp), total, {
                    "many": _blocking(raw_many), "copy": _blocking(raw_copy),
                    "venturi": _blocking(venturi),
                }, step=batch, warmup=min(batch, 1_000))
        finally:
            conn.close()
            await control.close()
    shape = f"{count:,} × {batch:,}"
    many, copy = f"raw psycopg executemany ({shape})", f"raw psycopg COPY ({shape})"
    bench.record(Figure(bench.scenario, many, total, secs["many"], raw=True))
    bench.record(Figure(bench.scenario, copy, total, secs["copy"], raw=True))
    bench.record(Figure(bench.scenario, f"SyncQueue.enqueue_many ({shape})", total,
                        secs["venturi"], (many, copy)))


@contextlib.asynccontextmanager
async def _callers(dsn: str) -> AsyncIterator[dict[str, Any]]:
    """One caller connection of each kind, every statement its own transaction."""
    engines = {d: create_async_engine(sa_url(dsn, d), pool_size=1, isolation_level="AUTOCOMMIT")
               for d in ("asyncpg", "psycopg")}
    apg = await asyncpg.connect(dsn)
    pg = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        async with AsyncSession(engines["asyncpg"]) as s_apg, \
                AsyncSession(engines["psycopg"]) as s_pg:
            yield {"asyncpg": apg, "psycopg": pg, "AsyncSession+asyncpg": s_apg,
                   "AsyncSession+psycopg": s_pg}
    finally:
        await pg.close()
        await apg.close()
        for engine in engines.values():
            await engine.dispose()


@scenario("conn_enqueue", "Queue.enqueue(conn=...) on each kind of caller connection")
async def conn_enqueue(bench: Bench) -> None:
    """`Queue.enqueue(task, conn=...)` N times in a loop on a connection the caller
    holds: an asyncpg `Connection` (the reference path), a psycopg `AsyncConnection`,
    and SQLAlchemy `AsyncSession`s on asyncpg and on psycopg; beside raw single-row
    INSERT loops on the asyncpg and the psycopg connection. Each statement commits on
    its own (asyncpg outside a transaction, psycopg and the engines in autocommit
    mode), as in the `enqueue` scenario's `conn=` figure."""
    n = bench.size.one_by_one
    tasks = [task(i) for i in range(n)]
    payloads = [payload(i) for i in range(n)]
    async with bench.fresh_prefix() as vp, bench.fresh_prefix() as rp, \
            Queue.connect(bench.dsn, prefix=vp, max_size=1) as queue, \
            _callers(bench.dsn) as callers:
        apg, pg = callers["asyncpg"], callers["psycopg"]
        insert_apg, insert_pg = RAW_ONE_ASYNCPG.format(p=rp), RAW_ONE.format(p=rp)

        async def raw_asyncpg(lo: int, hi: int) -> None:
            for p in payloads[lo:hi]:
                await apg.execute(insert_apg, uuid7(), KIND, orjson.dumps(p).decode(), 1, 25)

        async def raw_psycopg(lo: int, hi: int) -> None:
            for p in payloads[lo:hi]:
                await pg.execute(insert_pg, (uuid7(), KIND, orjson.dumps(p).decode(), 1, 25))

        def contender(conn: Any) -> Callable[[int, int], Awaitable[None]]:
            async def run(lo: int, hi: int) -> None:
                for t in tasks[lo:hi]:
                    await queue.enqueue(t, conn=conn)
            return run

        secs = await measure(bench, apg, (vp, rp), n, {
            "raw_asyncpg": raw_asyncpg, "raw_psycopg": raw_psycopg,
            **{name: contender(c) for name, c in callers.items()}}, step=250)
    raw_a, raw_p = "raw asyncpg single-row INSERT", "raw psycopg async single-row INSERT"
    ref = "Queue.enqueue(conn=<asyncpg Connection>)"
    bench.record(Figure(bench.scenario, raw_a, n, secs["raw_asyncpg"], raw=True,
                        note="on the caller's asyncpg connection"))
    bench.record(Figure(bench.scenario, raw_p, n, secs["raw_psycopg"], raw=True,
                        note="on the caller's psycopg AsyncConnection, autocommit"))
    bench.record(Figure(bench.scenario, ref, n, secs["asyncpg"], (raw_a,),
                        note="the asyncpg conn= path"))
    for name, raw in (("psycopg", raw_p), ("AsyncSession+asyncpg", raw_a),
                      ("AsyncSession+psycopg", raw_p)):
        label = {"psycopg": "psycopg AsyncConnection"}.get(name, name)
        bench.record(Figure(bench.scenario, f"Queue.enqueue(conn=<{label}>)", n, secs[name],
                            (ref, raw)))
