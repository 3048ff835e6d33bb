"""psycopg 3 connections as ``driver.Executor``: an ``AsyncConnection``, and a blocking
``Connection`` whose ``async`` methods never suspend.

The statements go as written, ``$n`` placeholders and all, through psycopg's
``RawCursor`` (server-side parameters, no client-side placeholder syntax): the
same text asyncpg sends. Rewriting them to ``%s`` would not be the same SQL: a
``$1`` that repeats is one parameter, and PostgreSQL matches a ``GROUP BY``
expression to its select-list twin only when their parameters are the same one.
Nothing is configured on the connection: JSON goes as text cast in the SQL,
jsonb comes back as text (the statements select it ``::text``), so a caller's
loaders do not matter. Each statement says whether psycopg may keep it prepared
(``Query.prepared``: only those that read no table, see psycopg_driver); a
connection that prepares nothing (``prepare_threshold=None``, as behind PgBouncer)
is not overruled.

A blocking executor serves ``SyncQueue``: its methods are ``async def`` so that
PostgresStore's operations, written once against ``Executor``, run on it
unchanged; they call psycopg's blocking API and never await anything that could
suspend, so an operation's coroutine finishes on its first step
(``venturi.sync.run_blocking``).

Transactions, for a caller's connection (``conn=``), are the caller's: a
statement joins the one open, and ``atomic`` is a savepoint inside it. A
connection in autocommit mode with none open gets a transaction of venturi's
own for a multi-statement operation (a dedup merge, a COPY and its wake-ups),
committed at its end; a single statement then commits on its own
(docs/integrations/producers.md). A connection that is not in autocommit mode
begins a transaction with the first statement, as psycopg always does; the
caller commits it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg.types.array import ListBinaryDumper

from ...errors import DatabaseError
from .._sql import Query
from .driver import Row
from .psycopg_errors import translate, translated
from .sqlstates import ABORTED, CLOSED

# How many rows a statement's call reads: none, the first, all of them.
NONE, ONE, ALL = 0, 1, 2
BAD = ConnStatus.BAD
# The attribute under which a caller's AsyncConnection keeps its executor.
_EXECUTOR = "_venturi_executor"


def _binary_lists(cur: psycopg.RawCursor[Any] | psycopg.AsyncRawCursor[Any],
                  args: Sequence[Any]) -> None:
    """Send this statement's arrays in binary: psycopg's text dumper quotes every
    element (a batch of 1,000 jobs spends most of its client time there). Set on
    the cursor, so the connection (a caller's) is left as it is."""
    for arg in args:
        if type(arg) is list:
            cur.adapters.register_dumper(list, ListBinaryDumper)
            return


def cursor(conn: psycopg.Connection[Any], args: Sequence[Any]) -> psycopg.RawCursor[Any]:
    """A cursor for one statement with ``args``, sent as written (``$n``)."""
    cur = psycopg.RawCursor(conn)
    _binary_lists(cur, args)
    return cur


def new_cursor(conn: psycopg.Connection[Any]) -> psycopg.RawCursor[Any]:
    """A cursor for every statement the driver sends on ``conn``, one after the other
    (PsycopgDriver keeps it with the connection): statements as written, arrays in
    binary. Reused, it also keeps what psycopg looked up for each parameter type,
    which a new cursor finds again at every statement."""
    cur = psycopg.RawCursor(conn)
    cur.adapters.register_dumper(list, ListBinaryDumper)
    return cur


def copy_sql(schema: str | None, table: str, columns: Sequence[str]) -> sql.Composed:
    """``COPY table (columns) FROM STDIN``, identifiers quoted by psycopg."""
    target = sql.Identifier(table) if schema is None else sql.Identifier(schema, table)
    return sql.Composed([sql.SQL("COPY "), target, sql.SQL(" ("),
                         sql.SQL(", ").join(sql.Identifier(c) for c in columns),
                         sql.SQL(") FROM STDIN")])


def check_usable(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Refuse a caller's connection that cannot take a statement, before sending one.
    Read on ``pgconn`` (``conn.info`` is a new object at every read)."""
    pgconn = conn.pgconn
    if pgconn.status == BAD:
        raise DatabaseError(CLOSED)
    if pgconn.transaction_status == TransactionStatus.INERROR:
        raise DatabaseError(ABORTED)


def _own_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``atomic`` opens a transaction (autocommit, none open) rather than a
    savepoint in the caller's (open, or begun implicitly by the first statement)."""
    return conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE


class PsycopgExecutor:
    """Statements on a blocking psycopg ``Connection`` (a pooled one, or a caller's)."""

    __slots__ = ("_dsn", "_prefix", "conn")

    def __init__(self, conn: psycopg.Connection[Any], prefix: str, dsn: str | None = None) -> None:
        self.conn = conn
        self._prefix = prefix
        self._dsn = dsn

    def _run(self, query: Query, args: Sequence[Any]) -> psycopg.RawCursor[Any]:
        try:
            return cursor(self.conn, args).execute(query.sql, args, prepare=query.prepared)
        except psycopg.Error as exc:
            raise translate(exc, self._prefix, self._dsn) from None

    async def fetch(self, query: Query, args: Sequence[Any]) -> list[Row]:
        return self._run(query, args).fetchall()

    async def fetchrow(self, query: Query, args: Sequence[Any]) -> Row | None:
        row: Row | None = self._run(query, args).fetchone()
        return row

    async def fetchval(self, query: Query, args: Sequence[Any]) -> Any:
        row = self._run(query, args).fetchone()
        return None if row is None else row[0]

    async def execute(self, query: Query, args: Sequence[Any]) -> None:
        self._run(query, args)

    def _command(self, sql: str) -> None:
        with translated(self._prefix, self._dsn):
            self.conn.execute(sql, prepare=False)

    async def script(self, sql: str) -> None:
        self._command(sql)  # no parameters: the simple protocol, several statements

    async def copy(self, schema: str | None, table: str, columns: Sequence[str],
                   records: Iterable[Sequence[Any]]) -> None:
        with translated(self._prefix, self._dsn), self.conn.cursor() as cur, \
                cur.copy(copy_sql(schema, table, columns)) as copy:
            for record in records:
                copy.write_row(record)

    @contextlib.asynccontextmanager
    async def atomic(self, savepoint: str) -> AsyncIterator[None]:
        if _own_transaction(self.conn):
            with translated(self._prefix, self._dsn), self.conn.transaction():
                yield
            return
        self._command(f"SAVEPOINT {savepoint}")
        try:
            yield
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                self.conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                self.conn.execute(f"RELEASE SAVEPOINT {savepoint}")
            raise
        self._command(f"RELEASE SAVEPOINT {savepoint}")


class AsyncPsycopgExecutor:
    """Statements on a caller's psycopg ``AsyncConnection``: PsycopgExecutor's
    statements, each awaited.

    Its statements share one cursor, which also keeps what psycopg looked up for
    each parameter type (a new cursor looks it up again): an executor that serves
    several calls (a SQLAlchemy session's, sqlalchemy_adoption) pays for it once.
    A statement takes it while it runs, so two at once (two tasks on one
    connection) each have their own."""

    __slots__ = ("_cursor", "_prefix", "conn")

    def __init__(self, conn: psycopg.AsyncConnection[Any], prefix: str) -> None:
        self.conn = conn
        self._prefix = prefix
        self._cursor: psycopg.AsyncRawCursor[Any] | None = None

    @classmethod
    def on(cls, conn: psycopg.AsyncConnection[Any], prefix: str) -> AsyncPsycopgExecutor:
        """The executor of ``conn=`` for a queue of ``prefix``: the one the connection
        keeps from an earlier call, with its cursor, else a new one it keeps. A new
        cursor and its type lookups cost a single enqueue as much as the rest of its
        client time above psycopg (benchmarks/enqueue_gap.py). Kept on the connection
        itself, so it lives and dies with it (a table of connections would keep them
        alive: the executor holds its connection)."""
        check_usable(conn)
        found = conn.__dict__.get(_EXECUTOR)
        if found is not None and found._prefix == prefix:
            return found  # type: ignore[no-any-return]
        found = conn.__dict__[_EXECUTOR] = cls(conn, prefix)
        return found

    async def _run(self, query: Query, args: Sequence[Any], rows: int) -> Any:
        cur, self._cursor = self._cursor, None
        if cur is None:
            cur = psycopg.AsyncRawCursor(self.conn)
        _binary_lists(cur, args)
        try:
            await cur.execute(query.sql, args, prepare=query.prepared)
            result = (await cur.fetchall() if rows == ALL
                      else await cur.fetchone() if rows == ONE else None)
        except psycopg.Error as exc:
            raise translate(exc, self._prefix) from None
        self._cursor = cur
        return result

    async def fetch(self, query: Query, args: Sequence[Any]) -> list[Row]:
        rows: list[Row] = await self._run(query, args, ALL)
        return rows

    async def fetchrow(self, query: Query, args: Sequence[Any]) -> Row | None:
        row: Row | None = await self._run(query, args, ONE)
        return row

    async def fetchval(self, query: Query, args: Sequence[Any]) -> Any:
        row = await self._run(query, args, ONE)
        return None if row is None else row[0]

    async def execute(self, query: Query, args: Sequence[Any]) -> None:
        await self._run(query, args, NONE)

    async def _command(self, sql: str) -> None:
        with translated(self._prefix):
            await self.conn.execute(sql, prepare=False)

    async def script(self, sql: str) -> None:
        await self._command(sql)

    async def copy(self, schema: str | None, table: str, columns: Sequence[str],
                   records: Iterable[Sequence[Any]]) -> None:
        with translated(self._prefix):
            async with self.conn.cursor() as cur, \
                    cur.copy(copy_sql(schema, table, columns)) as copy:
                for record in records:
                    await copy.write_row(record)

    @contextlib.asynccontextmanager
    async def atomic(self, savepoint: str) -> AsyncIterator[None]:
        if _own_transaction(self.conn):
            with translated(self._prefix):
                async with self.conn.transaction():
                    yield
            return
        await self._command(f"SAVEPOINT {savepoint}")
        try:
            yield
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                await self.conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                await self.conn.execute(f"RELEASE SAVEPOINT {savepoint}")
            raise
        await self._command(f"RELEASE SAVEPOINT {savepoint}")
