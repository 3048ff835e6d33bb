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

Between two statements a connection of its own pool stays out of the pool, with
its cursor, for the next statement of any thread (``PsycopgDriver._take``), as
the asyncpg driver keeps one: a checkout, a return and a new cursor cost a
single-row enqueue a noticeable part of its client time (benchmarks/results-producers.md).
A thread of the driver's own gives back those that no statement took for
``LINGER`` seconds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import psycopg
import psycopg_pool
from psycopg.pq import TransactionStatus

from ...config import mask_dsn
from ...errors import ConfigError
from .._sql import Query
from ..base import IdentityLock, Listener
from .adoption import adopt_blocking
from .driver import Executor, Row
from .psycopg_errors import translate, translated
from .psycopg_executors import ALL, NONE, ONE, PsycopgExecutor, new_cursor
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
# libpq's fallback_application_name: the sessions' name unless the DSN or PGAPPNAME
# gives one (venturi/store/_connect.py, named, does the same for asyncpg).
POOL_CONNECTION: dict[str, Any] = {"autocommit": True,
                                   "fallback_application_name": "venturi pool"}
POOLER_CONNECTION: dict[str, Any] = {**POOL_CONNECTION, "prepare_threshold": None}
# How long a kept connection stays out of the pool, unused (between one and two
# times this): see PsycopgDriver._take.
LINGER = 0.05

Kept = tuple[psycopg.Connection[Any], psycopg.RawCursor[Any]]


class PsycopgDriver:
    """A psycopg connection pool; statements block the calling thread."""

    # From this many rows enqueue_many goes by COPY rather than INSERT ... unnest
    # (producing.COPY_MIN_ROWS): on psycopg, whose binary arrays cost more per row
    # than asyncpg's, COPY is ahead from about 500 rows (benchmarks/results-producers.md).
    copy_min_rows = 500

    def __init__(self, pool: psycopg_pool.ConnectionPool[Any], *, prefix: str,
                 dsn: str | None = None, owns_pool: bool = False, pooler: bool = False,
                 listen_dsn: str | None = None) -> None:
        self.pool = pool
        self.prefix = prefix
        self.dsn = dsn
        self.pooler = pooler  # the pool's connections go through PgBouncer
        self.listen_dsn = listen_dsn  # a direct connection, for LISTEN
        self._owns_pool = owns_pool
        # Connections kept out of the pool between statements, each with its cursor;
        # only on a pool the driver owns: another user of a shared pool could not take
        # one. Taken and put back by list.pop/append, which are atomic; everything
        # else about them is under ``_lock``.
        self._linger = owns_pool
        self._idle: list[Kept] = []
        self._kept = 0  # connections kept so far: has any statement kept one since?
        self._asking = 0  # threads asking the pool for a connection
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._sweeper_waits = False  # waiting, with no timeout, for a kept connection
        self._sweeper: threading.Thread | None = None
        if owns_pool:
            # Started with the pool, not by a statement: a call starts no thread.
            self._sweeper = threading.Thread(target=self._sweep, daemon=True,
                                             name=f"venturi:{prefix}:linger")
            self._sweeper.start()

    @classmethod
    def connect(cls, dsn: str, *, prefix: str, min_size: int, max_size: int,
                connect_timeout: float, pooler: bool = False, listen_dsn: str | None = None
                ) -> tuple[PsycopgDriver, str | None]:
        """A driver on a new pool, and the schema its connections create tables in.
        One connection is made first, in the foreground: the pool would only log why
        it cannot connect, and the caller should read it."""
        try:
            with psycopg.connect(dsn, connect_timeout=max(1, int(connect_timeout)),
                                 **POOL_CONNECTION) as first:
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
        driver = cls(pool, prefix=prefix, dsn=dsn, owns_pool=True, pooler=pooler,
                     listen_dsn=listen_dsn)
        return driver, None if schema is None else schema[0]

    async def close(self) -> None:
        with self._lock:
            self._linger = False
            self._wake.notify()
        if self._sweeper is not None and self._sweeper is not threading.current_thread():
            self._sweeper.join(timeout=5)
        self._return_idle()
        if self._owns_pool:
            self.pool.close()

    def adopt(self, conn: Any) -> Executor:
        return adopt_blocking(conn, self.prefix, self.dsn)

    # --- one statement ---------------------------------------------------------------

    def _statement(self, query: Query, args: Sequence[Any], rows: int) -> Any:
        """Run one statement on a connection of the driver's and read ``rows`` of it.

        What ``pool.connection()`` does, without its context managers (a noticeable
        part of a single-row enqueue): a statement a caller's pool left in a
        transaction is committed, one that failed is rolled back; after a failure
        the connection goes back to the pool (which discards a broken one), else it
        is kept for the next statement."""
        try:
            kept = self._take()
        except psycopg.Error as exc:
            raise translate(exc, self.prefix, self.dsn) from None
        c, cur = kept
        try:
            cur.execute(query.sql, args, prepare=query.prepared)
            result = cur.fetchall() if rows == ALL else cur.fetchone() if rows == ONE else None
            if c.pgconn.transaction_status != TransactionStatus.IDLE:
                c.commit()
        except BaseException as exc:
            self._discard(c)
            if isinstance(exc, psycopg.Error):
                raise translate(exc, self.prefix, self.dsn) from None
            raise
        self._give_back(kept)
        return result

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
        with translated(self.prefix, self.dsn):
            kept = self._take()
        c = kept[0]
        try:
            yield PsycopgExecutor(c, self.prefix, self.dsn)
            with translated(self.prefix, self.dsn):
                if c.pgconn.transaction_status != TransactionStatus.IDLE:
                    c.commit()
        except BaseException:
            self._discard(c)
            raise
        self._give_back(kept)

    # --- the kept connections ------------------------------------------------------------

    def _take(self) -> Kept:
        """A kept connection and its cursor, else one of the pool's with a new cursor.

        Every statement looks here before asking the pool, so none waits for a
        connection that sits kept; and one put back while a thread waits for the
        pool goes to the pool (``_give_back``), so that thread does not wait for
        the sweeper either: a thread counts itself in ``_asking`` and then looks
        here again, one putting back appends and then reads ``_asking``, so at
        least one of the two sees the other."""
        idle = self._idle
        if idle:
            with contextlib.suppress(IndexError):  # another thread took the last one
                return idle.pop()
        with self._lock:
            self._asking += 1
        try:
            with contextlib.suppress(IndexError):
                return idle.pop()
            c = self.pool.getconn()
        finally:
            with self._lock:
                self._asking -= 1
        return c, new_cursor(c)

    def _give_back(self, kept: Kept) -> None:
        """After a statement that succeeded (its connection idle, in no transaction):
        keep the connection for the next one, or give it back to the pool."""
        if self._linger:
            self._idle.append(kept)
            self._kept += 1
            if self._sweeper_waits:
                with self._lock:
                    self._wake.notify()
            if not self._asking and self._linger:
                return
            try:  # a thread waits for the pool (or close() began): give one back
                kept = self._idle.pop()
            except IndexError:
                return
        self.pool.putconn(kept[0])

    def _discard(self, c: psycopg.Connection[Any]) -> None:
        """After a failed statement: roll back what it left open and give the
        connection back to the pool, which replaces a broken one."""
        if not c.closed and c.pgconn.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(Exception):
                c.rollback()
        self.pool.putconn(c)

    def _sweep(self) -> None:
        """The sweeper thread: give back the kept connections once no statement has
        kept one for LINGER seconds; sleep, without a timeout, while none is kept."""
        with self._lock:
            while self._linger:
                # Announced before looking: _give_back appends before it reads this,
                # so either this sees its connection or it wakes this.
                self._sweeper_waits = True
                if not self._idle:
                    self._wake.wait()
                self._sweeper_waits = False
                if not self._idle:
                    continue
                kept = self._kept
                deadline = time.monotonic() + LINGER
                while self._linger and (left := deadline - time.monotonic()) > 0:
                    self._wake.wait(left)  # a notify meant for the wait above ends it early
                if self._kept == kept:
                    self._lock.release()
                    try:
                        self._return_idle()
                    finally:
                        self._lock.acquire()

    def _return_idle(self) -> None:
        idle = self._idle
        while True:
            try:  # one at a time: a statement may take or put back one meanwhile
                c = idle.pop()[0]
            except IndexError:
                return
            with contextlib.suppress(Exception):
                self.pool.putconn(c)

    # --- dedicated sessions ---------------------------------------------------------------

    def listener(self, channels: Mapping[str, str]) -> Listener:
        raise ConfigError(f"listening for notifications {WORKER_ONLY}")

    def blocking_listener(self, listen: Query) -> BlockingListener:
        """A blocking LISTEN (the statement ``listen``), on a connection of its own
        (SyncQueue.result's listener thread): on ``listen_dsn`` when given, else on the
        pool's DSN, which must then not be a pooler's (its server connection, and the
        notifications, would go to whichever client runs the next transaction)."""
        if self.listen_dsn:
            return BlockingListener(self.listen_dsn, self.prefix, listen)
        if self.pooler:
            raise ConfigError("SyncQueue.result needs a direct connection to PostgreSQL "
                              "for LISTEN, not the pooler: pass listen_dsn")
        conninfo = self.pool.conninfo
        dsn = self.dsn or (conninfo if isinstance(conninfo, str) else conninfo())
        return BlockingListener(dsn, self.prefix, listen)

    def identity_lock(self, query: Query, args: Sequence[Any], *,
                      reclaim: Query | None = None, role: str = "lock") -> IdentityLock:
        raise ConfigError(f"the worker identity lock {WORKER_ONLY}")
