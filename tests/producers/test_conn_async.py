"""``Queue``'s ``conn=`` through every accepted kind of caller connection: asyncpg,
psycopg ``AsyncConnection``, SQLAlchemy ``AsyncSession`` and ``AsyncConnection`` on
either driver (docs/integrations/producers.md).

The job joins the caller's transaction: invisible outside until the caller
commits, gone with its rollback, its wake-up sent at the commit; venturi never
ends the caller's transaction; the reads on ``conn=`` see what the transaction
sees.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from tests.producers.callers import ASYNC_KINDS, Caller, async_caller, sa_url
from tests.producers.conftest import Notices
from tests.tasks import Embed, Refresh, Urgent
from venturi import DatabaseError, Queue, Status
from venturi.store.postgres import sqlalchemy_adoption


@pytest.fixture(params=ASYNC_KINDS)
async def caller(request: pytest.FixtureRequest, pg_dsn: str) -> AsyncIterator[Caller]:
    async with async_caller(request.param, pg_dsn) as made:
        yield made


async def test_a_rollback_leaves_no_job(pg_queue: Queue, caller: Caller) -> None:
    await pg_queue.enqueue(Refresh(uri="kept"))  # a committed candidate for the merge
    one = await pg_queue.enqueue(Embed(uri="file:///a"), conn=caller.conn)
    await pg_queue.enqueue_many([Embed(uri="b"), Embed(uri="c")], conn=caller.conn)
    merged = await pg_queue.enqueue(Refresh(uri="kept", version=2), conn=caller.conn)
    assert merged.merged
    assert await pg_queue.cancel(ids=[merged.id], conn=caller.conn) == 1
    assert caller.in_transaction()
    await caller.rollback()
    assert await pg_queue.job(one.id) is None
    assert await pg_queue.count(kind="test.embed") == 0
    assert await pg_queue.journal(merged.id) == []  # the merge's entry went too
    assert await pg_queue.count(kind="test.refresh") == 1  # and the cancel


async def test_a_commit_publishes_the_jobs_and_their_wakeups(
        pg_queue: Queue, caller: Caller, notices: Notices) -> None:
    one = await pg_queue.enqueue(Embed(uri="file:///a"), conn=caller.conn)
    ids = await pg_queue.enqueue_many([Embed(uri="b"), Refresh(uri="r")], conn=caller.conn)
    # Not visible outside the transaction, and no wake-up yet: notices sent before
    # the marker would arrive before it.
    assert await pg_queue.count() == 0
    assert await notices.upto_marker() == []
    assert caller.in_transaction()  # venturi left the transaction open
    await caller.commit()
    # (PostgreSQL folds a transaction's duplicate notices into one.)
    assert sorted(await notices.upto_marker()) == ["test.embed", "test.refresh"]
    assert {r.id for r in (await pg_queue.history()).jobs} == {one.id, *ids}


async def test_the_callers_own_writes_and_the_job_share_one_transaction(
        pg_queue: Queue, caller: Caller, prefix: str, pg_dsn: str) -> None:
    table = f"{prefix}orders"
    async with async_caller("asyncpg", pg_dsn) as admin:
        await admin.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        await admin.commit()
        try:
            for finish, expected in (("rollback", 0), ("commit", 1)):
                await caller.begin_asyncpg()
                await caller.execute(f"INSERT INTO {table} VALUES ({expected + 10})")
                await pg_queue.enqueue(Embed(uri=f"file:///{finish}"), conn=caller.conn)
                await (caller.commit() if finish == "commit" else caller.rollback())
                assert await pg_queue.count(kind="test.embed") == expected
                rows = await admin.conn.fetchval(f"SELECT count(*) FROM {table}")
                assert rows == expected
        finally:
            await admin.execute(f"DROP TABLE {table}")
            await admin.commit()


async def test_reads_on_conn_see_the_transaction(pg_queue: Queue, caller: Caller) -> None:
    job = await pg_queue.enqueue(Embed(uri="file:///seen"), conn=caller.conn)
    merged = await pg_queue.enqueue_many([Refresh(uri="m"), Refresh(uri="m")], conn=caller.conn)
    assert merged[0] == merged[1]
    record = await pg_queue.job(job.id, conn=caller.conn)
    assert record is not None and record.payload == {"uri": "file:///seen", "model": "small"}
    assert record.status is Status.PENDING
    assert [e.outcome.value for e in await pg_queue.journal(merged[0], conn=caller.conn)] == [
        "merged"]
    assert await pg_queue.count(subject="file:///seen", conn=caller.conn) == 1
    assert (await pg_queue.stats(conn=caller.conn)).pending_by_kind == {
        "test.embed": 1, "test.refresh": 1}
    assert (await pg_queue.detail(conn=caller.conn)).oldest_pending_age is not None
    assert len((await pg_queue.history(limit=10, conn=caller.conn)).jobs) == 2
    # Outside the transaction none of it exists yet.
    assert await pg_queue.job(job.id) is None
    assert (await pg_queue.stats()).pending_by_kind == {}
    await caller.rollback()


async def test_a_bulk_copy_joins_the_transaction(pg_queue: Queue, caller: Caller,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from venturi.store.postgres import producing

    monkeypatch.setattr(producing, "COPY_MIN_ROWS", 3)  # COPY, in a savepoint of the caller's
    await pg_queue.enqueue_many([Embed(uri=f"file:///{n}") for n in range(4)], conn=caller.conn)
    assert await pg_queue.count(conn=caller.conn) == 4
    await caller.rollback()
    assert await pg_queue.count() == 0
    await caller.begin_asyncpg()
    await pg_queue.enqueue_many([Embed(uri=f"file:///{n}") for n in range(4)], conn=caller.conn)
    await caller.commit()
    assert await pg_queue.count() == 4


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_a_session_kept_across_transactions_joins_each_one(
        pg_queue: Queue, pg_dsn: str, driver: str) -> None:
    """The driver connection found for one transaction of a session is reused while that
    transaction lasts, never into the next, which may run on another connection of the
    engine's pool: each job commits or rolls back with the transaction open when it was
    enqueued."""
    engine = create_async_engine(sa_url(pg_dsn, driver), pool_size=2)
    try:
        async with engine.connect() as a, engine.connect() as b:  # both in the pool
            assert a is not b
        backends = set()
        async with AsyncSession(engine) as session:
            kept = []
            for uri in ("1", "2", "3"):
                kept.append(await pg_queue.enqueue(Embed(uri=uri), conn=session))
                backends.add(await session.scalar(text("SELECT pg_backend_pid()")))
                await session.commit()
                gone = await pg_queue.enqueue(Embed(uri="no"), conn=session)
                backends.add(await session.scalar(text("SELECT pg_backend_pid()")))
                await session.rollback()
                assert await pg_queue.job(gone.id) is None
            assert len(backends) == 2  # the transactions took turns on the two connections
        assert {j.id for j in (await pg_queue.history()).jobs} == {e.id for e in kept}
    finally:
        await engine.dispose()


async def test_a_session_gone_leaves_nothing_behind(pg_queue: Queue, pg_dsn: str) -> None:
    """What venturi remembers about a session (where it found its driver connection)
    does not keep the session alive."""
    async with async_caller("AsyncSession+asyncpg", pg_dsn) as caller:
        await pg_queue.enqueue(Embed(uri="1"), conn=caller.conn)
        await caller.commit()
        session = weakref.ref(caller.conn.sync_session)
        del caller
    gc.collect()
    assert session() is None
    assert len(sqlalchemy_adoption._FOUND) == 0


async def test_a_plain_task_on_conn_joins_the_transaction_as_the_general_path_does(
        pg_queue: Queue, caller: Caller, notices: Notices) -> None:
    """Queue.enqueue's plain path (Store.enqueue_plain) on every kind of caller
    connection: gone with a rollback, published with its wake-up at the commit, the
    same row as the general path's (an option given: priority=)."""
    gone = await pg_queue.enqueue(Urgent(n=1), conn=caller.conn)
    assert caller.in_transaction()
    await caller.rollback()
    assert await pg_queue.job(gone.id) is None
    await caller.begin_asyncpg()
    fast = await pg_queue.enqueue(Urgent(n=2), conn=caller.conn)
    slow = await pg_queue.enqueue(Urgent(n=2), priority="high", conn=caller.conn)
    assert await pg_queue.count() == 0
    assert await notices.upto_marker() == []
    await caller.commit()
    assert await notices.upto_marker() == ["test.urgent"]  # folded into one at the commit
    rows = [await pg_queue.job(fast.id), await pg_queue.job(slow.id)]
    assert rows[0] is not None and rows[1] is not None
    assert (rows[0].kind, rows[0].payload, rows[0].priority, rows[0].max_failures,
            rows[0].created_at == rows[0].visible_at) == (
        rows[1].kind, rows[1].payload, rows[1].priority, rows[1].max_failures, True)


async def test_a_psycopg_connection_keeps_its_executor_and_is_not_kept_alive(
        pg_queue: Queue, pg_dsn: str) -> None:
    """A psycopg AsyncConnection keeps its executor (and cursor) from one call to the
    next, per queue prefix, and nothing of venturi's keeps the connection alive."""
    conn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    executors = set()
    for n in range(3):
        await pg_queue.enqueue(Urgent(n=n), conn=conn)
        executors.add(id(conn.__dict__["_venturi_executor"]))
    assert len(executors) == 1 and await pg_queue.count(kind="test.urgent") == 3
    await conn.close()
    with pytest.raises(DatabaseError, match="closed"):
        await pg_queue.enqueue(Urgent(n=9), conn=conn)
    gone = weakref.ref(conn)
    del conn
    gc.collect()
    assert gone() is None
