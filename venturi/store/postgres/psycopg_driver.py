"""The blocking psycopg driver: a psycopg_pool ``ConnectionPool`` behind ``driver.Driver``.

It is what ``SyncQueue`` runs PostgresStore's operations on (see
``psycopg_executors`` for why its ``async`` methods never suspend). Its own
connections are in autocommit mode, like asyncpg's: a statement is its own
transaction, one round trip, and ``atomic`` opens a transaction when an
operation needs several. A pool of the caller's (``from_pool``) may be in
either mode: the pool's ``connection()`` commits whatever a statement left
open when it gives the connection back.

It serves producers, inspection and administration; the worker's dedicated
sessions (LISTEN, the identity lock) belong to the asyncpg driver, which the
worker runs on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import psycopg
import psycopg_pool

from ...config import mask_dsn
from ...errors import ConfigError
from .._sql import Query
from ..base import IdentityLock, Listener
from .driver import Executor, Row
from .psycopg_errors import translate, translated
from .psycopg_executors import PsycopgExecutor, cursor
from .psycopg_listen import BlockingListener

WORKER_ONLY = ("needs an asyncio store: run workers on venturi.Queue.connect, "
               "SyncQueue serves producers")


# psycopg prepares a statement it has run five times on a connection, and PostgreSQL may
# then cache a generic plan for it (driver.SESSION_SETTINGS says what that does to the
# claim). The pool's connections prepare nothing instead: each statement goes unnamed
# and is planned with its parameters. Not a startup parameter as with asyncpg: SyncQueue
# has no pooler switch, and PgBouncer refuses startup parameters it does not track.
POOL_CONNECTION = {"autocommit": True, "prepare_threshold": None}


class PsycopgDriver:
    """A psycopg connection pool; statements block the calling thread."""

    def __init__(self, pool: psycopg_pool.ConnectionPool[Any], *, prefix: str,
                 dsn: str | None = None, owns_pool: bool = False) -> None:
        self.pool = pool
        self.prefix = prefix
        self.dsn = dsn
        self._owns_pool = owns_pool

    @classmethod
    def connect(cls, dsn: str, *, prefix: str, min_size: int, max_size: int,
                connect_timeout: float) -> tuple[PsycopgDriver, str | None]:
        """A driver on a new pool, and the schema its connections create tables in.
        One connection is made first, in the foreground: the pool would only log why
        it cannot connect, and the caller should read it."""
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(connect_timeout))
                                 ) as first:
                schema = first.execute("SELECT current_schema()").fetchone()
        except psycopg.ProgrammingError as exc:  # an unparseable DSN or an unknown option
            if exc.sqlstate is None:
                raise ConfigError(f"invalid DSN {mask_dsn(dsn)}: {exc}") from None
            raise translate(exc, prefix, dsn) from None
        except psycopg.Error as exc:
            raise translate(exc, prefix, dsn) from None
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            dsn, min_size=min_size, max_size=max_size,
            kwargs=dict(POOL_CONNECTION),
            timeout=connect_timeout, open=False, name=f"venturi:{prefix}")
        pool.open()
        driver = cls(pool, prefix=prefix, dsn=dsn, owns_pool=True)
        return driver, None if schema is None else schema[0]

    async def close(self) -> None:
        if self._owns_pool:
            self.pool.close()

    def adopt(self, conn: Any) -> Executor:
        from .adoption import adopt_blocking

        return adopt_blocking(conn, self.prefix, self.dsn)

    # --- one statement ---------------------------------------------------------------

    @staticmethod
    def _cursor(c: psycopg.Connection[Any], query: Query,
                args: Sequence[Any]) -> psycopg.RawCursor[Any]:
        return cursor(c, args).execute(query.sql, args)

    async def fetch(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                    keep: bool = False) -> list[Row]:
        if on is not None:
            return await on.fetch(query, args)
        try:
            with self.pool.connection() as c:
                return self._cursor(c, query, args).fetchall()
        except psycopg.Error as exc:
            raise translate(exc, self.prefix, self.dsn) from None

    async def fetchrow(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Row | None:
        if on is not None:
            return await on.fetchrow(query, args)
        try:
            with self.pool.connection() as c:
                row: Row | None = self._cursor(c, query, args).fetchone()
                return row
        except psycopg.Error as exc:
            raise translate(exc, self.prefix, self.dsn) from None

    async def fetchval(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Any:
        row = await self.fetchrow(query, args, on=on)
        return None if row is None else row[0]

    async def execute(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                      keep: bool = False) -> None:
        if on is not None:
            await on.execute(query, args)
            return
        try:
            with self.pool.connection() as c:
                self._cursor(c, query, args)
        except psycopg.Error as exc:
            raise translate(exc, self.prefix, self.dsn) from None

    # --- several statements on one connection -------------------------------------------

    @contextlib.asynccontextmanager
    async def session(self, on: Executor | None = None, *,
                      keep: bool = False) -> AsyncIterator[Executor]:
        if on is not None:
            yield on
            return
        with translated(self.prefix, self.dsn), self.pool.connection() as c:
            yield PsycopgExecutor(c, self.prefix, self.dsn)

    # --- dedicated sessions ---------------------------------------------------------------

    def listener(self, channels: Mapping[str, str]) -> Listener:
        raise ConfigError(f"listening for notifications {WORKER_ONLY}")

    def blocking_listener(self, listen: Query) -> BlockingListener:
        """A blocking LISTEN (the statement ``listen``), on a connection of its own
        (SyncQueue.result)."""
        conninfo = self.pool.conninfo
        dsn = self.dsn or (conninfo if isinstance(conninfo, str) else conninfo())
        return BlockingListener(dsn, self.prefix, listen)

    def identity_lock(self, query: Query, args: Sequence[Any], *,
                      reclaim: Query | None = None) -> IdentityLock:
        raise ConfigError(f"the worker identity lock {WORKER_ONLY}")
