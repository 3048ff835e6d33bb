"""The callers' connections ``conn=`` accepts, each opened the way an application holds it.

A :class:`Caller` wraps one: ``conn`` is what goes to ``conn=``, and ``commit``,
``rollback`` and ``in_transaction`` are the caller's own handles on it, through its
own library. Nothing is begun ahead: the enqueue is the transaction's first
statement (the case where a driver's lazy ``BEGIN`` matters), unless a test does
its own work first with ``execute``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

ASYNC_KINDS = ["asyncpg", "psycopg", "AsyncSession+asyncpg", "AsyncSession+psycopg",
               "AsyncConnection+asyncpg", "AsyncConnection+psycopg"]
BLOCKING_KINDS = ["psycopg", "Session+psycopg", "Connection+psycopg"]


def sa_url(dsn: str, driver: str) -> str:
    """The DSN as a SQLAlchemy URL on ``driver`` (``asyncpg`` or ``psycopg``)."""
    scheme, rest = dsn.split("://", 1)
    assert scheme in ("postgresql", "postgres"), dsn
    return f"postgresql+{driver}://{rest}"


@dataclass
class Caller:
    kind: str
    conn: Any
    _tx: Any = None

    async def execute(self, sql: str) -> None:
        """A statement of the caller's own, through its own library."""
        c = self.conn
        if isinstance(c, (asyncpg.Connection, psycopg.AsyncConnection)):
            await c.execute(sql)
        else:
            await c.execute(text(sql))

    async def begin_asyncpg(self) -> None:
        # asyncpg has no implicit transaction: the caller opens one.
        if isinstance(self.conn, asyncpg.Connection) and self._tx is None:
            self._tx = self.conn.transaction()
            await self._tx.start()

    async def commit(self) -> None:
        if self._tx is not None:
            tx, self._tx = self._tx, None
            await tx.commit()
        elif not isinstance(self.conn, asyncpg.Connection):
            await self.conn.commit()

    async def rollback(self) -> None:
        if self._tx is not None:
            tx, self._tx = self._tx, None
            await tx.rollback()
        elif not isinstance(self.conn, asyncpg.Connection):
            await self.conn.rollback()

    def in_transaction(self) -> bool:
        c = self.conn
        if isinstance(c, asyncpg.Connection):
            return c.is_in_transaction()
        if isinstance(c, psycopg.AsyncConnection):
            return c.info.transaction_status != TransactionStatus.IDLE
        return bool(c.in_transaction())


@contextlib.asynccontextmanager
async def async_caller(kind: str, dsn: str) -> AsyncIterator[Caller]:
    if kind == "asyncpg":
        conn = await asyncpg.connect(dsn)
        try:
            caller = Caller(kind, conn)
            await caller.begin_asyncpg()
            yield caller
        finally:
            await conn.close()
        return
    if kind == "psycopg":
        aconn = await psycopg.AsyncConnection.connect(dsn)
        try:
            yield Caller(kind, aconn)
        finally:
            await aconn.close()
        return
    what, driver = kind.split("+")
    engine = create_async_engine(sa_url(dsn, driver), pool_size=1)
    try:
        if what == "AsyncSession":
            async with AsyncSession(engine) as session:
                yield Caller(kind, session)
        else:
            async with engine.connect() as sa_conn:
                yield Caller(kind, sa_conn)
    finally:
        await engine.dispose()


@dataclass
class BlockingCaller:
    kind: str
    conn: Any

    def execute(self, sql: str) -> None:
        if isinstance(self.conn, psycopg.Connection):
            self.conn.execute(sql)
        else:
            self.conn.execute(text(sql))

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def in_transaction(self) -> bool:
        c = self.conn
        if isinstance(c, psycopg.Connection):
            return c.info.transaction_status != TransactionStatus.IDLE
        return bool(c.in_transaction())


@contextlib.contextmanager
def blocking_caller(kind: str, dsn: str) -> Iterator[BlockingCaller]:
    if kind == "psycopg":
        with psycopg.connect(dsn) as conn:
            yield BlockingCaller(kind, conn)
        return
    what, driver = kind.split("+")
    engine = create_engine(sa_url(dsn, driver), pool_size=1)
    try:
        if what == "Session":
            with Session(engine) as session:
                yield BlockingCaller(kind, session)
        else:
            with engine.connect() as sa_conn:
                yield BlockingCaller(kind, sa_conn)
    finally:
        engine.dispose()
