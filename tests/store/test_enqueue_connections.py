"""The insert paths keep the connection they just used for the next insert
(``AsyncpgDriver._keep``): reuse without a pool round trip, and none of the ways
a kept connection could go wrong (reused after an error, left in a transaction,
held past close, starving the store's other statements, unbounded)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.conftest import drop_prefix, wait_for
from tests.tasks import Embed
from venturi import DatabaseError, DatabaseUnavailable, Queue
from venturi.store._sql import Query
from venturi.store.postgres import PostgresStore, asyncpg_driver


@pytest.fixture
async def small(pg_dsn: str, prefix: str) -> AsyncIterator[PostgresStore]:
    """A store whose pool has a single connection: any leak of it shows as a hang."""
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, min_size=1, max_size=1)
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)


def count_acquires(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    original = asyncpg.pool.Pool.acquire

    def acquire(self: Any, *args: Any, **kw: Any) -> Any:
        if self is store.pool:
            calls[0] += 1
        return original(self, *args, **kw)

    monkeypatch.setattr(asyncpg.pool.Pool, "acquire", acquire)
    return calls


async def backends(pg_dsn: str, store: PostgresStore) -> int:
    """Server sessions of this store's pool (its application_name is asyncpg's default)."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        mine = await conn.fetchval("SELECT pg_backend_pid()")
        return int(await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid = ANY($1::int[]) AND pid <> $2",
            [h._con.get_server_pid() for h in store.pool._holders if h._con is not None], mine))
    finally:
        await conn.close()


async def test_consecutive_inserts_reuse_one_connection(
        small: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = Queue(small)
    calls = count_acquires(small, monkeypatch)
    for n in range(20):
        await queue.enqueue(Embed(uri=f"file:///{n}"))
    await queue.enqueue_many([Embed(uri="a"), Embed(uri="b")])
    assert calls[0] <= 1
    assert await queue.count(kind="test.embed") == 22


async def test_kept_connection_goes_back_to_the_pool_when_idle(
        small: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncpg_driver, "LINGER", 0.02)
    queue = Queue(small)
    await queue.enqueue(Embed(uri="file:///a"))
    assert small.driver._idle
    await wait_for(lambda: not small.driver._idle and not small.driver._releasing, what="released")
    # The pool's only connection is back: a direct acquire gets it at once.
    async with small.pool.acquire(timeout=5) as c:
        assert await c.fetchval("SELECT 1") == 1


async def test_other_statements_take_the_kept_connection(
        small: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncpg_driver, "LINGER", 3600)  # the timer would never save us
    queue = Queue(small)
    await queue.enqueue(Embed(uri="file:///a"))
    assert small.driver._idle
    assert await asyncio.wait_for(queue.count(kind="test.embed"), timeout=5) == 1
    assert await asyncio.wait_for(queue.stats(), timeout=5) is not None


async def test_close_returns_a_kept_connection(
        pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncpg_driver, "LINGER", 3600)
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, min_size=1, max_size=1)
    try:
        await store.migrate()
        await Queue(store).enqueue(Embed(uri="file:///a"))
        assert store.driver._idle
        pool = store.pool
        # pool.close() waits for every acquired connection: a kept one would stall it.
        await asyncio.wait_for(store.close(), timeout=3)
        assert pool.is_closing() and not store.driver._idle and store.driver._timer is None
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)


async def test_a_connection_is_not_kept_after_a_failed_statement(
        small: PostgresStore, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncpg_driver, "LINGER", 3600)
    queue = Queue(small)
    await queue.enqueue(Embed(uri="file:///a"))
    (kept,) = small.driver._idle
    raw = kept._con
    conn = await asyncpg.connect(pg_dsn)
    try:  # the kept session is killed behind the store's back
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", raw.get_server_pid())
    finally:
        await conn.close()
    await wait_for(lambda: raw.is_closed(), what="client noticed the lost session")
    # A closed kept connection is skipped (the pool reconnects its slot).
    await queue.enqueue(Embed(uri="file:///b"))
    # A statement error on the kept connection: it goes back through the pool, not kept.
    assert len(small.driver._idle) == 1
    with pytest.raises(DatabaseError):
        await small.driver.execute(Query("fails", "SELECT 1/0", False), (), keep=True)
    assert small.driver._idle == []
    await queue.enqueue(Embed(uri="file:///c"))
    assert await queue.count(kind="test.embed") == 3


async def test_a_connection_broken_mid_protocol_is_discarded_not_kept(
        small: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = Queue(small)
    await queue.enqueue(Embed(uri="file:///a"))
    (kept,) = small.driver._idle
    raw = kept._con
    original = asyncpg.connection.Connection.execute

    async def broken(self: Any, *args: Any, **kw: Any) -> Any:
        if self is raw:
            raise asyncpg.InternalClientError("cannot switch to state 12")
        return await original(self, *args, **kw)

    monkeypatch.setattr(asyncpg.connection.Connection, "execute", broken)
    with pytest.raises(DatabaseUnavailable):
        await queue.enqueue(Embed(uri="file:///b"))
    assert raw.is_closed() and small.driver._idle == []
    await queue.enqueue(Embed(uri="file:///c"))
    assert small.driver._idle[0]._con is not raw
    assert await queue.count(kind="test.embed") == 2


async def test_cancelled_mid_statement_the_connection_is_not_reused_half_done(
        small: PostgresStore, pg_dsn: str, prefix: str) -> None:
    queue = Queue(small)
    await queue.enqueue(Embed(uri="file:///warm"))
    blocker = await asyncpg.connect(pg_dsn)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(f"LOCK TABLE {prefix}jobs IN ACCESS EXCLUSIVE MODE")
        task = asyncio.create_task(queue.enqueue(Embed(uri="file:///cancelled")))

        async def waiting_on_lock() -> bool:
            return bool(await blocker.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE $1", f"%{prefix}jobs%"))

        await wait_for(waiting_on_lock, what="insert blocked on the lock")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert small.driver._idle == []
        await tx.rollback()
    finally:
        await blocker.close()
    await queue.enqueue(Embed(uri="file:///after"))
    assert await queue.count(kind="test.embed") == 2


async def test_enqueue_on_callers_connection_stays_in_its_transaction(
        small: PostgresStore, pg_dsn: str) -> None:
    queue = Queue(small)
    conn = await asyncpg.connect(pg_dsn)
    try:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await queue.enqueue(Embed(uri="file:///a"), conn=conn)
                await queue.enqueue_many([Embed(uri="b"), Embed(uri="c")], conn=conn)
                raise RuntimeError("roll back")
        assert small.driver._idle == []  # the caller's connection is never kept
        assert await queue.count(kind="test.embed") == 0
    finally:
        await conn.close()


async def test_concurrent_inserts_stay_within_the_pool(pg_dsn: str, prefix: str) -> None:
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, min_size=1, max_size=3)
    try:
        await store.migrate()
        queue = Queue(store)
        for _ in range(3):
            await asyncio.gather(*(queue.enqueue(Embed(uri=f"file:///{n}")) for n in range(30)),
                                 *(queue.enqueue_many([Embed(uri="m")]) for _ in range(10)))
            assert len(store.driver._idle) <= 3
            assert await backends(pg_dsn, store) <= 3
        assert await queue.count(kind="test.embed") == 120
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)


async def test_a_shared_pool_is_not_held(pg_dsn: str, prefix: str) -> None:
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    try:
        store = PostgresStore.from_pool(pool, prefix=prefix)
        await store.migrate()
        await Queue(store).enqueue(Embed(uri="file:///a"))
        assert store.driver._idle == []
        async with pool.acquire(timeout=5) as c:  # the caller's pool is free at once
            assert await c.fetchval(f"SELECT count(*) FROM {prefix}jobs") == 1
    finally:
        await pool.close()
        await drop_prefix(pg_dsn, prefix)
