"""The bulk enqueue path's shortcuts keep the slow path's results exactly."""

from __future__ import annotations

import datetime as dt
import uuid

import asyncpg

from tests.tasks import Embed, Summarize, Urgent
from venturi import ManualClock, Queue
from venturi._ids import uuid7, uuid7_many
from venturi.store.postgres import PostgresStore


def test_uuid7_many_matches_uuid7() -> None:
    ids = [uuid7(), *uuid7_many(5_000), uuid7(), *uuid7_many(1), uuid7()]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for u in ids[:100] + ids[-3:]:
        assert u.version == 7 and u.variant == uuid.RFC_4122
        assert uuid.UUID(int=u.int) == u and hash(uuid.UUID(str(u))) == hash(u)
    assert uuid7_many(0) == []


async def test_enqueue_many_all_defaults(queue: Queue, clock: ManualClock) -> None:
    # Every optional column at its default: the store may send them as NULL arrays.
    ids = await queue.enqueue_many([Urgent(n=i) for i in range(3)])
    for id in ids:
        row = await queue.job(id)
        assert row is not None
        assert (row.visible_at, row.subject, row.dedup_key, row.periodic, row.carry) == (
            clock.now(), None, None, False, None)
        assert row.priority == 0


async def test_enqueue_many_mixed_columns(queue: Queue, clock: ManualClock) -> None:
    later = clock.now() + dt.timedelta(hours=1)
    ids = await queue.enqueue_many([
        Urgent(n=1), Embed(uri="file:///x/1"), ("test.summarize", {"uri": "file:///y"}),
        Summarize(uri="file:///z", words=5),
    ])
    rows = [await queue.job(i) for i in ids]
    assert [r.subject for r in rows if r] == [None, "file:///x/1", "file:///y", "file:///z"]
    assert [r.priority for r in rows if r] == [0, 1, 2, 2]
    assert all(r and r.visible_at == clock.now() for r in rows)
    one = await queue.enqueue(Embed(uri="file:///w"), at=later)
    row = await queue.job(one.id)
    assert row is not None and row.visible_at == later


async def test_pool_release_leaves_no_session_lock(pg_store: PostgresStore, pg_dsn: str) -> None:
    # Pool connections are not reset on release: migrate must not leave its lock behind.
    await pg_store.migrate()
    async with pg_store.pool.acquire() as c:
        pid = await c.fetchval("SELECT pg_backend_pid()")
    conn = await asyncpg.connect(pg_dsn)
    try:
        held = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1", pid)
    finally:
        await conn.close()
    assert held == 0
