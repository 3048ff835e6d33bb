"""Producer scenarios: ``Queue.enqueue`` and ``Queue.enqueue_many`` beside raw asyncpg.

The raw references write the same rows (same ids, payload JSON, kind, priority
and failure budget) into a second prefix migrated with the same schema, so they
pay for the same indexes and constraints. They do the per-row work any
hand-written producer must do (generate the id, encode the payload) and
nothing else: no validation, no NOTIFY.
"""

from __future__ import annotations

import asyncpg
import orjson

from venturi import Queue
from venturi._ids import uuid7

from ..harness import Bench, Figure, measure, scenario
from ..tasks import KIND, payload, task

RAW_ONE = (
    "INSERT INTO {p}jobs (id, kind, payload, priority, max_failures) "
    "VALUES ($1, $2, $3::jsonb, $4, $5)"
)
RAW_MANY = (
    "INSERT INTO {p}jobs (id, kind, payload, priority, max_failures) "
    "SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::int2[], $5::int4[])"
)
COLUMNS = ["id", "kind", "payload", "priority", "max_failures"]


@scenario("enqueue", "enqueue, one job per call")
async def enqueue_one(bench: Bench) -> None:
    """`Queue.enqueue` N times in a loop (through its pool, and on a caller's
    connection with `conn=`), against a raw loop of single-row INSERTs through
    asyncpg `execute`, on one held connection and through an asyncpg pool
    acquired per job (what a request handler does). One commit per job."""
    n = bench.size.one_by_one
    tasks = [task(i) for i in range(n)]
    payloads = [payload(i) for i in range(n)]
    async with (
        bench.fresh_prefix() as vp,
        bench.fresh_prefix() as rp,
        Queue.connect(bench.dsn, prefix=vp, min_size=1, max_size=1) as queue,
    ):
        conn = await asyncpg.connect(bench.dsn)
        pool = await asyncpg.create_pool(bench.dsn, min_size=1, max_size=1)
        try:
            insert = RAW_ONE.format(p=rp)

            async def raw(lo: int, hi: int) -> None:
                for p in payloads[lo:hi]:
                    await conn.execute(insert, uuid7(), KIND, orjson.dumps(p).decode(), 1, 25)

            async def raw_pool(lo: int, hi: int) -> None:
                for p in payloads[lo:hi]:
                    async with pool.acquire() as c:
                        await c.execute(insert, uuid7(), KIND, orjson.dumps(p).decode(), 1, 25)

            async def via_pool(lo: int, hi: int) -> None:
                for t in tasks[lo:hi]:
                    await queue.enqueue(t)

            async def via_conn(lo: int, hi: int) -> None:
                for t in tasks[lo:hi]:
                    await queue.enqueue(t, conn=conn)

            secs = await measure(bench, conn, (vp, rp), n, {
                "raw": raw, "raw_pool": raw_pool, "pool": via_pool, "conn": via_conn,
            }, step=250)
        finally:
            await pool.close()
            await conn.close()
    ref = "raw single-row INSERT"
    ref_pool = "raw single-row INSERT via pool"
    bench.record(Figure(bench.scenario, ref, n, secs["raw"], raw=True,
                        note="on one connection"))
    bench.record(Figure(bench.scenario, ref_pool, n, secs["raw_pool"], raw=True,
                        note="an asyncpg pool with its default reset, acquired per job"))
    bench.record(Figure(bench.scenario, "Queue.enqueue", n, secs["pool"], (ref, ref_pool),
                        note="through venturi's pool"))
    bench.record(Figure(bench.scenario, "Queue.enqueue(conn=...)", n, secs["conn"], (ref,),
                        note="on a connection the caller already holds"))


@scenario("enqueue_many", "enqueue_many, batches")
async def enqueue_many(bench: Bench) -> None:
    """`Queue.enqueue_many` in batches of 1,000 (and, at full size, one batch of
    50,000), against a raw `INSERT ... SELECT FROM unnest(...)` and a raw
    `COPY` (asyncpg `copy_records_to_table`) of the same rows in the same
    batches. Each batch is one call and one transaction."""
    size = bench.size
    shapes = [(size.batch, size.batches)]
    if size.big_batch:
        shapes.append((size.big_batch, 1))
    total = max(b * k for b, k in shapes)
    tasks = [task(i) for i in range(total)]
    payloads = [payload(i) for i in range(total)]
    async with (
        bench.fresh_prefix() as vp,
        bench.fresh_prefix() as rp,
        Queue.connect(bench.dsn, prefix=vp, min_size=1, max_size=1) as queue,
    ):
        conn = await asyncpg.connect(bench.dsn)
        try:
            insert = RAW_MANY.format(p=rp)
            for batch, count in shapes:

                async def raw_insert(lo: int, hi: int, batch: int = batch) -> None:
                    for start in range(lo, hi, batch):
                        chunk = payloads[start:min(start + batch, hi)]
                        k = len(chunk)
                        await conn.execute(
                            insert, [uuid7() for _ in range(k)], [KIND] * k,
                            [orjson.dumps(p).decode() for p in chunk], [1] * k, [25] * k,
                        )

                async def raw_copy(lo: int, hi: int, batch: int = batch) -> None:
                    for start in range(lo, hi, batch):
                        chunk = payloads[start:min(start + batch, hi)]
                        await conn.copy_records_to_table(
                            f"{rp}jobs", columns=COLUMNS,
                            records=[(uuid7(), KIND, orjson.dumps(p).decode(), 1, 25)
                                     for p in chunk],
                        )

                async def venturi(lo: int, hi: int, batch: int = batch) -> None:
                    for start in range(lo, hi, batch):
                        await queue.enqueue_many(tasks[start:min(start + batch, hi)])

                jobs = batch * count
                secs = await measure(bench, conn, (vp, rp), jobs, {
                    "insert": raw_insert, "copy": raw_copy, "venturi": venturi,
                }, step=batch, warmup=min(batch, 1_000))
                shape = f"{count:,} × {batch:,}" if count > 1 else f"1 × {batch:,}"
                ins = f"raw INSERT ... unnest ({shape})"
                copy = f"raw COPY ({shape})"
                bench.record(Figure(bench.scenario, ins, jobs, secs["insert"], raw=True))
                bench.record(Figure(bench.scenario, copy, jobs, secs["copy"], raw=True))
                bench.record(Figure(bench.scenario, f"Queue.enqueue_many ({shape})", jobs,
                                    secs["venturi"], (ins, copy)))
        finally:
            await conn.close()
