"""The blocking psycopg driver: a psycopg_pool ``ConnectionPool`` behind ``driver.Driver``.

It is what ``SyncQueue`` runs PostgresStore's operations on (see
``psycopg_executors`` for why its ``async`` methods never suspend). Its own
connections are in autocommit mode, like asyncpg's: a statement is its own
transaction, one round trip, and ``atomic`` opens a transaction when an
operation needs several. A pool of the caller's (``from_pool``) may be in
either mode: a statement it left in a transaction is committed before the
connection goes back.

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
from psycopg.pq import TransactionStatus

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


# Which statements stay prepared is the driver's choice, statement by statement: only
# those that read no table (``Query.prepared``: the single-row insert), whose generic
# plan cannot go stale; every other one goes unnamed and is planned with its parameters
# each time (driver.SESSION_SETTINGS says what a stale generic plan does to a query
# that scans). So no session setting is needed, and none is made. Behind a transaction
# pooler (``pooler=True``) nothing is prepared at all: PgBouncer would send the next
# statement to a server connection that never prepared it.
POOL_CONNECTION: dict[str, Any] = {"autocommit": True}
POOLER_CONNECTION: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
# How many rows a one-statement call reads: none, the first, all of them.
NONE, ONE, ALL = 0, 1, 2


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
                connect_timeout: float, pooler: bool = False
                ) -> tuple[PsycopgDriver, str | None]:
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
            kwargs=dict(POOLER_CONNECTION if pooler else POOL_CONNECTION),
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

    def _statement(self, query: Query, args: Sequence[Any], rows: int) -> Any:
        """Run one statement on a connection of the pool and read ``rows`` of it.

        What ``pool.connection()`` does, without its context managers (a noticeable
        part of a single-row enqueue): a statement a caller's pool left in a
        transaction is committed, one that failed is rolled back, and the
        connection goes back to the pool either way."""
        pool = self.pool
        try:
            c = pool.getconn()
        except psycopg.Error as exc:
            raise translate(exc, self.prefix, self.dsn) from None
        try:
            cur = cursor(c, args).execute(query.sql, args, prepare=query.prepared)
            result = cur.fetchall() if rows == ALL else cur.fetchone() if rows == ONE else None
            if c.pgconn.transaction_status != TransactionStatus.IDLE:
                c.commit()
            return result
        except BaseException as exc:
            if not c.closed and c.pgconn.transaction_status != TransactionStatus.IDLE:
                with contextlib.suppress(Exception):
                    c.rollback()
            if isinstance(exc, psycopg.Error):
                raise translate(exc, self.prefix, self.dsn) from None
            raise
        finally:
            pool.putconn(c)

    async def fetch(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                    keep: bool = False) -> list[Row]:
        if on is not None:
            return await on.fetch(query, args)
        rows: list[Row] = self._statement(query, args, ALL)
        return rows

    async def fetchrow(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Row | None:
        if on is not None:
            return await on.fetchrow(query, args)
        row: Row | None = self._statement(query, args, ONE)
        return row

    async def fetchval(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Any:
        if on is not None:
            return await on.fetchval(query, args)
        row = self._statement(query, args, ONE)
        return None if row is None else row[0]

    async def execute(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                      keep: bool = False) -> None:
        if on is not None:
            await on.execute(query, args)
            return
        self._statement(query, args, NONE)

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
