"""Bad ``conn=``: each a one-line error, raised before anything is written.

What is not a connection venturi accepts (a TypeError naming the accepted types,
before any statement is sent), a closed connection, a transaction an earlier
statement aborted, a session of an engine that is not PostgreSQL, a database
without the queue's tables.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import asyncpg
import psycopg
import pytest
from sqlalchemy import Integer, create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session, mapped_column

from tests.producers.callers import (
    ASYNC_KINDS,
    BLOCKING_KINDS,
    async_caller,
    blocking_caller,
    sa_url,
)
from tests.tasks import Embed, Refresh
from venturi import DatabaseError, Queue, SchemaMissing, SyncQueue


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert message and "\n" not in message, message
    return message


class Impostor:
    """Looks like a connection (the methods a driver would call) and records any call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        async def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)
        return record


async def test_an_unknown_object_is_refused_before_any_statement(
        pg_queue: Queue, pg_dsn: str) -> None:
    impostor = Impostor()
    for call in (lambda c: pg_queue.enqueue(Embed(uri="a"), conn=c),
                 lambda c: pg_queue.enqueue(Refresh(uri="r"), conn=c),
                 lambda c: pg_queue.enqueue_many([Embed(uri="a")], conn=c),
                 lambda c: pg_queue.cancel(ids=[], conn=c),
                 lambda c: pg_queue.count(conn=c),
                 lambda c: pg_queue.stats(conn=c)):
        with pytest.raises(TypeError) as raised:
            await call(impostor)
        assert one_line(raised) == (
            "conn= takes an asyncpg Connection, a psycopg AsyncConnection, or a SQLAlchemy "
            "AsyncConnection or AsyncSession, not tests.producers.test_bad_conn.Impostor")
    assert impostor.calls == []
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    try:
        with pytest.raises(TypeError, match=r"not asyncpg\.pool\.Pool"):
            await pg_queue.enqueue(Embed(uri="a"), conn=pool)
    finally:
        await pool.close()
    assert await pg_queue.count() == 0


async def test_a_blocking_connection_given_to_queue_points_at_sync_queue(
        pg_queue: Queue, pg_dsn: str) -> None:
    for kind in BLOCKING_KINDS:
        with blocking_caller(kind, pg_dsn) as caller:
            with pytest.raises(TypeError) as raised:
                await pg_queue.enqueue(Embed(uri="a"), conn=caller.conn)
            assert one_line(raised).endswith("a synchronous connection goes to venturi.SyncQueue")
            assert not caller.in_transaction()


async def test_an_asyncio_connection_given_to_sync_queue_points_at_queue(
        pg_dsn: str, prefix: str) -> None:
    with SyncQueue.connect(pg_dsn, prefix=prefix) as queue:
        for kind in ASYNC_KINDS:
            async with async_caller(kind, pg_dsn) as caller:
                with pytest.raises(TypeError) as raised:
                    queue.enqueue(Embed(uri="a"), conn=caller.conn)
                assert one_line(raised).startswith(
                    "conn= takes a psycopg Connection, or a SQLAlchemy Connection or Session")
                assert raised.value.args[0].endswith("an asyncio connection goes to venturi.Queue")
        with pytest.raises(TypeError, match=r"not builtins\.str"):
            queue.enqueue(Embed(uri="a"), conn="postgresql://")


async def test_a_closed_connection(pg_queue: Queue, pg_dsn: str) -> None:
    for kind in ASYNC_KINDS:
        async with async_caller(kind, pg_dsn) as caller:
            conn = caller.conn
            if isinstance(conn, AsyncSession):
                continue  # a closed session opens a new transaction: not closed for good
            await conn.close()
            with pytest.raises(DatabaseError) as raised:
                await pg_queue.enqueue(Embed(uri="a"), conn=conn)
            assert one_line(raised) == "conn= is closed: pass an open connection", kind


def test_a_closed_blocking_connection(sync_queue: SyncQueue, pg_dsn: str) -> None:
    for kind in ("psycopg", "Connection+psycopg"):
        with blocking_caller(kind, pg_dsn) as caller:
            caller.conn.close()
            with pytest.raises(DatabaseError) as raised:
                sync_queue.enqueue(Embed(uri="a"), conn=caller.conn)
            assert one_line(raised) == "conn= is closed: pass an open connection", kind


async def test_an_aborted_transaction(pg_queue: Queue, pg_dsn: str) -> None:
    for kind in ASYNC_KINDS:
        async with async_caller(kind, pg_dsn) as caller:
            with pytest.raises(Exception, match="division by zero"):
                await caller.execute("SELECT 1/0")
            for call in (lambda: pg_queue.enqueue(Embed(uri="a"), conn=caller.conn),
                         lambda: pg_queue.enqueue(Refresh(uri="r"), conn=caller.conn),
                         lambda: pg_queue.count(conn=caller.conn)):
                with pytest.raises(DatabaseError) as raised:
                    await call()
                assert one_line(raised).startswith("the transaction is aborted"), kind
            await caller.rollback()
            await caller.begin_asyncpg()
            await pg_queue.enqueue(Embed(uri="after"), conn=caller.conn)
            await caller.commit()
    assert await pg_queue.count() == len(ASYNC_KINDS)


def test_an_aborted_blocking_transaction(sync_queue: SyncQueue, pg_dsn: str) -> None:
    for kind in BLOCKING_KINDS:
        with blocking_caller(kind, pg_dsn) as caller:
            with pytest.raises(Exception, match="division by zero"):
                caller.execute("SELECT 1/0")
            with pytest.raises(DatabaseError) as raised:
                sync_queue.enqueue(Embed(uri="a"), conn=caller.conn)
            assert one_line(raised).startswith("the transaction is aborted"), kind
            caller.rollback()
            sync_queue.enqueue(Embed(uri="after"), conn=caller.conn)
            caller.commit()
    assert sync_queue.count() == len(BLOCKING_KINDS)


def test_a_session_whose_flush_failed(sync_queue: SyncQueue, pg_dsn: str, prefix: str) -> None:
    table = f"{prefix}orders"

    class Base(DeclarativeBase):
        pass

    order = type("Order", (Base,), {"__tablename__": table,
                                    "id": mapped_column(Integer, primary_key=True)})
    engine = create_engine(sa_url(pg_dsn, "psycopg"))
    Base.metadata.create_all(engine)
    try:
        with Session(engine) as session:
            session.add_all([order(id=1)])
            session.commit()
            session.add(order(id=1))  # a duplicate key: the flush fails
            with pytest.raises(Exception, match="duplicate key"):
                session.flush()
            with pytest.raises(DatabaseError) as raised:
                sync_queue.enqueue(Embed(uri="a"), conn=session)
            assert one_line(raised).startswith(
                "conn=: the Session's transaction was rolled back by an earlier error")
    finally:
        Base.metadata.drop_all(engine)
        engine.dispose()
    assert sync_queue.count() == 0


def test_a_session_on_another_engine(sync_queue: SyncQueue) -> None:
    engine = create_engine("sqlite://")
    with Session(engine) as session:
        with pytest.raises(TypeError) as raised:
            sync_queue.enqueue(Embed(uri="a"), conn=session)
        assert one_line(raised) == ("conn= takes a SQLAlchemy Session on PostgreSQL "
                                    "(postgresql+psycopg://), not one on sqlite+pysqlite")
        assert not session.in_transaction()  # nothing begun on it
    with engine.connect() as conn, pytest.raises(TypeError, match="not one on sqlite"):
        sync_queue.enqueue(Embed(uri="a"), conn=conn)
    engine.dispose()


async def test_an_async_session_on_another_engine(pg_queue: Queue, pg_dsn: str) -> None:
    engine = create_async_engine("sqlite+aiosqlite://")
    async with AsyncSession(engine) as session:
        with pytest.raises(TypeError) as raised:
            await pg_queue.enqueue(Embed(uri="a"), conn=session)
        assert one_line(raised) == (
            "conn= takes a SQLAlchemy AsyncSession on PostgreSQL (postgresql+asyncpg:// or "
            "postgresql+psycopg://), not one on sqlite+aiosqlite")
        assert not session.in_transaction()
    await engine.dispose()
    # A blocking driver under an asyncio session is another engine too.
    with SyncQueue.connect(pg_dsn, prefix=pg_queue.prefix) as queue:
        engine2 = create_engine(sa_url(pg_dsn, "psycopg"))
        with Session(engine2) as session2:
            queue.enqueue(Embed(uri="fine"), conn=session2)  # the blocking one is fine
            session2.rollback()
        engine2.dispose()


@pytest.fixture
def other_database(pg_dsn: str) -> Iterator[str]:
    """The DSN of a fresh, empty database on the same server (dropped afterwards)."""
    name = f"venturi_other_{secrets.token_hex(4)}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    base, _, _db = pg_dsn.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


async def test_a_connection_to_a_database_without_the_tables(
        pg_queue: Queue, pg_dsn: str, other_database: str) -> None:
    for kind in ASYNC_KINDS:
        async with async_caller(kind, other_database) as caller:
            with pytest.raises(SchemaMissing) as raised:
                await pg_queue.enqueue(Embed(uri="a"), conn=caller.conn)
            assert one_line(raised).startswith(f"table {pg_queue.prefix}jobs does not exist")
    with SyncQueue.connect(pg_dsn, prefix=pg_queue.prefix) as queue:
        for kind in BLOCKING_KINDS:
            with blocking_caller(kind, other_database) as blocking, \
                    pytest.raises(SchemaMissing):
                queue.enqueue(Embed(uri="a"), conn=blocking.conn)
    assert await pg_queue.count() == 0


def test_sync_queue_connect_reports_a_bad_dsn_in_one_line(pg_dsn: str, prefix: str) -> None:
    with pytest.raises(DatabaseError) as raised, \
            SyncQueue.connect("postgresql://root@127.0.0.1:1/test", prefix=prefix,
                              connect_timeout=2):
        pass
    assert one_line(raised).startswith("database unavailable (postgresql://root@127.0.0.1:1/test)")
    with pytest.raises(ValueError, match="invalid DSN"), \
            SyncQueue.connect("nonsense=1", prefix=prefix):
        pass
    with pytest.raises(ValueError, match="invalid prefix"), \
            SyncQueue.connect("postgresql://x", prefix="Bad-Prefix"):
        pass
    with pytest.raises(SchemaMissing), SyncQueue.connect(pg_dsn, prefix=prefix) as queue:
        queue.enqueue(Embed(uri="a"))  # not migrated
