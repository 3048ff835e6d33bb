"""The journal follows its job without a foreign key (sql/0001_init.sql): whatever
deletes jobs, by venturi or by hand, takes their entries along, and a delete racing
the settlements that write entries leaves none behind (PostgreSQL only)."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from uuid import UUID

import asyncpg

from tests.helpers import new_job
from venturi import Queue
from venturi.store.base import Action, ClaimRequest, JobRecord, Settlement
from venturi.store.postgres import PostgresStore

LEASES = {"k": dt.timedelta(minutes=5)}


async def _orphans(conn: asyncpg.Connection, prefix: str) -> int:
    count: int = await conn.fetchval(
        f"SELECT count(*) FROM {prefix}journal AS e"
        f" WHERE NOT EXISTS (SELECT 1 FROM {prefix}jobs AS j WHERE j.id = e.job_id)")
    return count


async def _completed(store: PostgresStore, n: int) -> list[UUID]:
    await store.enqueue([new_job() for _ in range(n)])
    jobs = await store.claim(ClaimRequest("w/1", LEASES, n))
    results = await store.settle_many(
        "w/1", [Settlement(j.id, j.run_count, Action.COMPLETE) for j in jobs])
    assert all(r.applied for r in results)
    return [j.id for j in jobs]


async def test_deleting_jobs_by_hand_or_truncating_takes_their_journal(
        pg_store: PostgresStore, pg_dsn: str) -> None:
    p = pg_store.prefix
    ids = await _completed(pg_store, 6)
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval(f"SELECT count(*) FROM {p}journal") == 6
        await conn.execute(f"DELETE FROM {p}jobs WHERE id = ANY($1::uuid[])", ids[:2])
        assert await conn.fetchval(f"SELECT count(*) FROM {p}journal") == 4
        assert await _orphans(conn, p) == 0
        assert await Queue(pg_store).cancel(ids=[ids[2]]) == 1
        assert await conn.fetchval(f"SELECT count(*) FROM {p}journal") == 3
        await conn.execute(f"TRUNCATE {p}jobs")
        assert await conn.fetchval(f"SELECT count(*) FROM {p}journal") == 0
        await _completed(pg_store, 2)
        await conn.execute(f"TRUNCATE {p}journal, {p}jobs")  # both named: no error either
        assert await conn.fetchval(f"SELECT count(*) FROM {p}journal") == 0
    finally:
        await conn.close()


async def test_cancel_racing_settlements_leaves_no_entry_behind(
        pg_store: PostgresStore, pg_dsn: str) -> None:
    """Settlers (writing entries) and a canceller (deleting the jobs) on their own
    connections, over the same rows in opposite orders: every entry either went with
    its job or belongs to a job that survived."""
    p = pg_store.prefix
    settler = await PostgresStore.connect(pg_dsn, prefix=p, min_size=3, max_size=3,
                                          clock=pg_store.clock)
    conn = await asyncpg.connect(pg_dsn)
    rng = random.Random(7)
    try:
        for _ in range(3):
            await pg_store.enqueue([new_job() for _ in range(300)])
            jobs = await pg_store.claim(ClaimRequest("w/1", LEASES, 300))
            order = [j.id for j in jobs]
            rng.shuffle(order)

            async def settle(chunk: list[int], jobs: list[JobRecord] = jobs) -> None:
                await settler.settle_many("w/1", [
                    Settlement(jobs[i].id, jobs[i].run_count, Action.COMPLETE) for i in chunk])

            async def cancel(order: list[UUID] = order) -> None:
                for start in range(0, len(order), 15):
                    await pg_store.cancel(ids=order[start:start + 15])

            chunks = [list(range(i, len(jobs), 3))[k:k + 10]
                      for i in range(3) for k in range(0, 100, 10)]
            await asyncio.wait_for(asyncio.gather(
                cancel(), *(settle(c) for c in chunks)), 60)
            assert await conn.fetchval(f"SELECT count(*) FROM {p}jobs") == 0
            assert await _orphans(conn, p) == 0
    finally:
        await conn.close()
        await settler.close()
