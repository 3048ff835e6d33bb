"""A SQLAlchemy ``Session``, ``AsyncSession``, ``Connection`` or ``AsyncConnection`` as
``conn=``: the driver connection underneath, in the session's transaction.

SQLAlchemy's public way down is ``session.connection()`` (the connection of the
session's current transaction; it begins one if none is open, as any statement
through the session would), then its pooled DBAPI connection
(``Connection.connection``) and that one's ``driver_connection``. The statements
then run on that driver connection, so they are part of whatever the session
commits or rolls back; venturi commits and rolls back nothing. A ``Connection``
not yet in a transaction is begun (SQLAlchemy's autobegin, done explicitly), so
its ``commit()`` covers the job.

One driver needs a nudge. SQLAlchemy's asyncpg adapter sends its ``BEGIN`` lazily,
before the first statement that goes *through SQLAlchemy*; a statement sent to
the asyncpg connection before that would commit on its own, and a rollback of
the session would leave the job behind. So when the asyncpg connection is not
in a transaction yet (and the engine is not in autocommit mode), the adapter's
own ``_start_transaction()`` — what SQLAlchemy's cursor calls at that point — is
called first. psycopg needs nothing: it begins the transaction itself on the
first statement, and SQLAlchemy's commit is psycopg's.

The engine is checked before anything is sent: PostgreSQL, through asyncpg or
psycopg for an asyncio session, through psycopg 3 for a blocking one.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import asyncpg
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from ...errors import DatabaseError
from .._sql import Query
from .asyncpg_executor import AsyncpgExecutor
from .driver import Executor, Row
from .sqlstates import CLOSED, line

ASYNC_DRIVERS = ("asyncpg", "psycopg")
BLOCKING_DRIVERS = ("psycopg",)
PENDING_ROLLBACK = ("conn=: the Session's transaction was rolled back by an earlier error: "
                    "call session.rollback() before using it again")

SQLAlchemyTarget = Session | Connection | AsyncSession | AsyncConnection


def check_engine(target: SQLAlchemyTarget, drivers: Sequence[str]) -> None:
    """Refuse a session or connection that is not on PostgreSQL through one of ``drivers``."""
    what = type(target).__name__
    try:
        if isinstance(target, Session):
            dialect = target.get_bind().dialect
        elif isinstance(target, AsyncSession):
            dialect = target.sync_session.get_bind().dialect
        else:
            dialect = target.dialect
    except sa_exc.UnboundExecutionError:
        raise TypeError(f"conn= got a SQLAlchemy {what} bound to no engine") from None
    if dialect.name != "postgresql" or dialect.driver not in drivers:
        urls = " or ".join(f"postgresql+{d}://" for d in drivers)
        raise TypeError(f"conn= takes a SQLAlchemy {what} on PostgreSQL ({urls}), "
                        f"not one on {dialect.name}+{dialect.driver}")


def _failed(exc: sa_exc.SQLAlchemyError) -> DatabaseError:
    if isinstance(exc, sa_exc.PendingRollbackError):
        return DatabaseError(PENDING_ROLLBACK)
    return DatabaseError(f"conn=: {type(exc).__name__}: {line(exc)}")


# Where each asyncio session or connection was last found to run on: the transaction,
# the SQLAlchemy connection, and the executor made on its driver connection. Reaching
# them through SQLAlchemy (``session.connection()``, a greenlet hop) cost about as much
# client time as the insert itself, and within one transaction they cannot change; the
# executor, reused, keeps its cursor (psycopg_executors). Weak on the session's side: a
# transaction holds its session, and an entry must not keep either alive (the executor
# holds only the driver connection).
_FOUND: weakref.WeakKeyDictionary[
    Any, tuple[weakref.ref[Any], weakref.ref[Connection], Executor]] = \
    weakref.WeakKeyDictionary()


def _sync_target(target: AsyncSession | AsyncConnection) -> Session | Connection | None:
    return target.sync_session if isinstance(target, AsyncSession) else target.sync_connection


def found_executor(target: AsyncSession | AsyncConnection, prefix: str,
                   dsn: str | None) -> Executor | None:
    """The executor ``target`` was found to run on before, if its connection is still
    in the same open transaction and needs nothing sent to join it; else None (take
    SQLAlchemyAsyncExecutor's way down)."""
    sync = _sync_target(target)
    entry = None if sync is None else _FOUND.get(sync)
    if sync is None or entry is None:
        return None
    transaction: Any = entry[0]()
    conn = entry[1]()
    if (transaction is None or conn is None or not transaction.is_active
            or sync.get_transaction() is not transaction
            or conn.closed or conn.invalidated or not conn.in_transaction()):
        return None
    return _joined(conn.connection, prefix, dsn, entry[2])


def _joined(pooled: Any, prefix: str, dsn: str | None,
            found: Executor | None = None) -> Executor | None:
    """An executor on the pooled DBAPI connection's driver connection (``found`` when
    it is on that one), or None when the asyncpg connection has not begun the
    session's transaction yet (see above)."""
    driver = pooled.driver_connection
    if isinstance(driver, asyncpg.Connection):
        if not driver.is_in_transaction() and not pooled.dbapi_connection.autocommit:
            return None
        if isinstance(found, AsyncpgExecutor) and found.conn is driver and not found.broken:
            return found
        return AsyncpgExecutor(driver, prefix, dsn)
    psycopg_async = _psycopg_async()
    if not isinstance(driver, psycopg_async.AsyncConnection):  # check_engine let only these by
        raise TypeError(f"conn=: unexpected driver connection {type(driver).__name__}")
    psycopg_async.check_usable(driver)
    if isinstance(found, psycopg_async.AsyncPsycopgExecutor) and found.conn is driver:
        return found
    return psycopg_async.AsyncPsycopgExecutor(driver, prefix)


class _PsycopgAsync:
    """What _joined uses of psycopg, imported on first use: a session on asyncpg
    needs no psycopg installed."""

    def __init__(self) -> None:
        import psycopg

        from .psycopg_executors import AsyncPsycopgExecutor, check_usable

        self.AsyncConnection = psycopg.AsyncConnection
        self.AsyncPsycopgExecutor = AsyncPsycopgExecutor
        self.check_usable = check_usable


_PSYCOPG_ASYNC: list[_PsycopgAsync] = []


def _psycopg_async() -> _PsycopgAsync:
    if not _PSYCOPG_ASYNC:
        _PSYCOPG_ASYNC.append(_PsycopgAsync())
    return _PSYCOPG_ASYNC[0]


async def _driver_executor(target: AsyncSession | AsyncConnection, prefix: str,
                           dsn: str | None) -> Executor:
    try:
        conn = await target.connection() if isinstance(target, AsyncSession) else target
        if conn.closed:
            raise DatabaseError(CLOSED)
        if not conn.in_transaction():
            await conn.begin()
        # In a transaction the DBAPI connection is checked out: reading it is plain
        # attribute access (what get_raw_connection() does, without its greenlet hop).
        sync_conn = conn.sync_connection
        assert sync_conn is not None
        pooled = sync_conn.connection
        sync = _sync_target(target)
        transaction = None if sync is None else sync.get_transaction()
    except sa_exc.SQLAlchemyError as exc:
        raise _failed(exc) from None
    executor = _joined(pooled, prefix, dsn)
    if executor is None:
        try:
            adapted: Any = pooled.dbapi_connection
            await adapted._start_transaction()
        except Exception as exc:  # SQLAlchemy's DBAPI error around asyncpg's
            raise DatabaseError(f"conn=: could not begin the transaction: {line(exc)}"
                                ) from None
        executor = _joined(pooled, prefix, dsn)
        assert executor is not None
    if sync is not None and transaction is not None:
        _FOUND[sync] = (weakref.ref(transaction), weakref.ref(sync_conn), executor)
    return executor


class SQLAlchemyAsyncExecutor:
    """An executor on an asyncio session's driver connection, found on first use:
    ``adopt`` is synchronous, reaching the connection is not."""

    __slots__ = ("_dsn", "_executor", "_prefix", "_target")

    def __init__(self, target: AsyncSession | AsyncConnection, prefix: str,
                 dsn: str | None) -> None:
        check_engine(target, ASYNC_DRIVERS)
        self._target = target
        self._prefix = prefix
        self._dsn = dsn
        self._executor: Executor | None = None

    async def _on(self) -> Executor:
        if self._executor is None:
            self._executor = await _driver_executor(self._target, self._prefix, self._dsn)
        return self._executor

    async def fetch(self, query: Query, args: Sequence[Any]) -> list[Row]:
        return await (await self._on()).fetch(query, args)

    async def fetchrow(self, query: Query, args: Sequence[Any]) -> Row | None:
        return await (await self._on()).fetchrow(query, args)

    async def fetchval(self, query: Query, args: Sequence[Any]) -> Any:
        return await (await self._on()).fetchval(query, args)

    async def execute(self, query: Query, args: Sequence[Any]) -> None:
        await (await self._on()).execute(query, args)

    async def script(self, sql: str) -> None:
        await (await self._on()).script(sql)

    async def copy(self, schema: str | None, table: str, columns: Sequence[str],
                   records: Iterable[Sequence[Any]]) -> None:
        await (await self._on()).copy(schema, table, columns, records)

    @contextlib.asynccontextmanager
    async def atomic(self, savepoint: str) -> AsyncIterator[None]:
        async with (await self._on()).atomic(savepoint):
            yield


def blocking_executor(target: Session | Connection, prefix: str) -> Executor:
    """An executor on a blocking session's psycopg connection (``SyncQueue``)."""
    check_engine(target, BLOCKING_DRIVERS)
    try:
        conn = target.connection() if isinstance(target, Session) else target
        if conn.closed:
            raise DatabaseError(CLOSED)
        if not conn.in_transaction():
            conn.begin()
        driver = conn.connection.driver_connection
    except sa_exc.SQLAlchemyError as exc:
        raise _failed(exc) from None
    import psycopg

    from .psycopg_executors import PsycopgExecutor, check_usable

    if not isinstance(driver, psycopg.Connection):  # check_engine let only psycopg by
        raise TypeError(f"conn=: unexpected driver connection {type(driver).__name__}")
    check_usable(driver)
    return PsycopgExecutor(driver, prefix)
