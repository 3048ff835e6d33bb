"""The asyncpg driver: a pool, the kept connection, COPY, error translation.

It implements ``driver.Driver``, so PostgresStore's operations never touch
asyncpg: they hand it a named query and its positional parameters. asyncpg
speaks ``$n`` placeholders, so the SQL goes as written; JSON goes as text (the
statements cast it), and asyncpg returns jsonb as text by default.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

import asyncpg

from ...config import mask_dsn
from ...errors import ConfigError
from .. import _connect
from .._sql import Query
from ..base import IdentityLock, Listener, Maintenance
from .adoption import adopt_async
from .asyncpg_errors import DRIVER_ERRORS, TRANSIENT_ERRORS, translate, translated
from .asyncpg_executor import AsyncpgExecutor
from .asyncpg_plans import GENERIC_AFTER, PlanModes
from .asyncpg_sessions import AsyncpgIdentityLock, AsyncpgListener, AsyncpgMaintenance
from .asyncpg_setup import keep_session, session_settings, session_setup
from .driver import CACHED_PLAN_SETTINGS, Executor, Row
from .sqlstates import line

# Connections for the statements marked ``-- plan: cached`` (the claim and the limited
# claim's fast path): a worker claims one batch at a time, one statement after the
# other; a second serves two workers sharing one store.
CACHED_PLAN_CONNECTIONS = 2

# How long a kept connection stays out of the pool, unused, for the next statement
# that asked to keep it (between one and two times this): see AsyncpgDriver._keep.
LINGER = 0.05


def _usable(c: Any) -> bool:
    """Whether a kept connection can run a statement. One whose session was lost
    while kept is not: asyncpg closed it and took its slot back into the pool
    (its proxy is detached) or will when it is released."""
    try:
        return not c.is_closed()
    except asyncpg.InterfaceError:  # detached: the slot is back in the pool
        return False


class AsyncpgDriver:
    """An asyncpg pool, with the connections the hot paths keep out of it.

    A pool's acquire and release are a noticeable part of a single-row enqueue and
    of a worker's claim (docs/benchmarks.md, "An insert keeps its connection").
    Statements sent with ``keep=True`` (the insert and claim paths) instead keep the
    connection they just used, so a producer enqueuing in a loop, or a worker
    claiming again as soon as slots free up, reuses it at the cost of a list pop; a
    timer gives it back to the pool once no statement has kept it for ``LINGER``
    seconds. A connection is kept only after a statement that succeeded outside a
    transaction; after any error (a broken connection, a cancellation
    mid-statement) it goes back through the pool's own release, which waits out a
    cancel and rolls back. Every other statement takes a kept connection before
    asking the pool, so none waits for the timer. A run of inserts on a kept
    connection also switches it to generic plans, and any other statement back
    (asyncpg_plans.py).
    """

    def __init__(self, pool: asyncpg.Pool, *, prefix: str, dsn: str | None = None,
                 listen_dsn: str | None = None, owns_pool: bool = False,
                 pooler: bool = False, cached: asyncpg.Pool | None = None,
                 plans: PlanModes | None = None) -> None:
        self.pool = pool
        # The pool's sessions switched to generic plans for the statements marked
        # ``-- prepared:`` (asyncpg_plans.py); None: they plan as the session says.
        # Only on a pool the driver owns, whose reset hook is ``plans.reset``.
        self._plans = plans if owns_pool else None
        # The connections of the statements marked ``-- plan: cached`` (driver.py,
        # CACHED_PLAN_SETTINGS); None: they run on the pool like the others.
        self.cached = cached
        # Its connection between two statements, held rather than released while no
        # other statement wants one: a pool's acquire and release cost a pickup's claim
        # about 50 µs. ``_cached_busy``: statements running or waiting for a connection.
        self._cached_idle: list[Any] = []
        self._cached_busy = 0
        self.prefix = prefix
        self.dsn = dsn
        self.listen_dsn = listen_dsn or dsn
        self.pooler = pooler
        self._owns_pool = owns_pool
        # Only on a pool the driver owns: another user of a shared pool could not
        # take a kept connection.
        self._linger = owns_pool
        self._idle: list[Any] = []
        self._kept = 0  # connections kept so far: has any statement kept one since the timer?
        self._timer: asyncio.TimerHandle | None = None
        self._releasing: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(cls, dsn: str, *, prefix: str, min_size: int, max_size: int,
                      pooler: bool, listen_dsn: str | None,
                      connect_timeout: float) -> tuple[AsyncpgDriver, str | None]:
        """A driver on a new pool, and the schema its connections create tables in.
        ``pooler`` turns the statement cache off, for PgBouncer in transaction mode."""
        settings = session_settings(dsn, pooler)
        # Behind a pooler nothing is prepared (and no setting made): nothing to switch.
        mode = (settings or {}).get("plan_cache_mode")
        plans = PlanModes(mode) if mode is not None else None
        try:
            pool = await asyncpg.create_pool(
                dsn, min_size=min_size, max_size=max_size, timeout=connect_timeout,
                statement_cache_size=0 if pooler else 256,
                max_inactive_connection_lifetime=60.0,
                reset=keep_session if plans is None else plans.reset,
                init=session_setup(settings),
                connect=cast(Any, _connect.connect),  # the stubs' protocol spells out every option
                server_settings=_connect.named(dsn, "pool"),
            )
        except (ValueError, TypeError, asyncpg.ClientConfigurationError) as exc:
            # Before the transient errors: ClientConfigurationError is an InterfaceError.
            raise ConfigError(f"invalid DSN {mask_dsn(dsn)}: {line(exc)}") from None
        except DRIVER_ERRORS as exc:
            raise translate(exc, prefix, dsn) from None
        try:
            with translated(prefix, dsn):
                schema: str | None = await pool.fetchval("SELECT current_schema()")
        except BaseException:
            pool.terminate()
            raise
        cached = None
        if not pooler:
            # Opened by the first claim, so that a producer never opens one; never
            # closed for being idle: a worker woken after a quiet spell would pay a
            # connection and a plan before its first job.
            cached = asyncpg.create_pool(
                dsn, min_size=0, max_size=CACHED_PLAN_CONNECTIONS, timeout=connect_timeout,
                max_inactive_connection_lifetime=0, reset=keep_session,
                init=session_setup(session_settings(dsn, False, CACHED_PLAN_SETTINGS)),
                connect=cast(Any, _connect.connect), server_settings=_connect.named(dsn, "claim"))
            await cached  # no connection yet: only checks the options
        return cls(pool, prefix=prefix, dsn=dsn, listen_dsn=listen_dsn, owns_pool=True,
                   pooler=pooler, cached=cached, plans=plans), schema

    async def close(self) -> None:
        self._linger = False
        await self._return_idle()
        if self.cached is not None:
            idle, self._cached_idle = self._cached_idle, []
            for c in idle:
                with contextlib.suppress(Exception):
                    await self.cached.release(c)
        if self._owns_pool:
            for pool in (self.pool, self.cached):
                if pool is not None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(5):
                            await pool.close()
                    pool.terminate()

    def adopt(self, conn: Any) -> Executor:
        return adopt_async(conn, self.prefix, self.dsn)

    # --- one statement ---------------------------------------------------------------

    async def _run(self, method: str, query: Query, args: Sequence[Any], on: Executor | None,
                   keep: bool) -> Any:
        if on is not None:
            return await getattr(on, method)(query, args)
        if query.cached_plan and self.cached is not None:
            return await self._run_cached(method, query, args, self.cached)
        try:
            # _checkout's common case without awaiting a coroutine for it: this runs
            # once per enqueued job.
            idle = self._idle
            c = idle.pop() if idle and _usable(idle[-1]) else await self._checkout()
            try:
                plans = self._plans
                if plans is not None:
                    if query.prepared and keep:
                        plans.streak += 1
                        if plans.streak > GENERIC_AFTER and c is not plans.known:
                            if c.get_server_pid() not in plans.generic:
                                await plans.to_generic(c)
                            plans.known = c
                    else:
                        plans.streak = 0
                        if plans.generic:
                            await plans.to_own(c)
                result = await getattr(c, method)(query.sql, *args)
            except BaseException as exc:
                await self._discard(c, isinstance(exc, asyncpg.InternalClientError))
                raise
            # _keep without its checks: one statement with parameters that succeeded
            # ended its implicit transaction with it (the protocol's Sync), and a
            # connection closed since is caught by _usable when it is taken.
            if keep and self._linger:
                self._keep_idle(c)
            else:
                await self.pool.release(c)
            return result
        except DRIVER_ERRORS as exc:
            raise translate(exc, self.prefix, self.dsn) from None

    async def _run_cached(self, method: str, query: Query, args: Sequence[Any],
                          pool: asyncpg.Pool) -> Any:
        idle = self._cached_idle
        self._cached_busy += 1
        try:
            while idle:
                c = idle.pop()
                if _usable(c):
                    break
                with contextlib.suppress(Exception):
                    await pool.release(c)  # the pool reconnects its slot later
            else:
                c = await pool.acquire()
            try:
                result = await getattr(c, method)(query.sql, *args)
            except BaseException as exc:
                # Through the pool's release, which waits out a cancel and rolls back.
                await self._discard(c, isinstance(exc, asyncpg.InternalClientError), pool)
                raise
            if self._cached_busy > 1:  # another statement may be waiting for the pool
                await pool.release(c)
            else:
                idle.append(c)
            return result
        except DRIVER_ERRORS as exc:
            raise translate(exc, self.prefix, self.dsn) from None
        finally:
            self._cached_busy -= 1

    async def fetch(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                    keep: bool = False) -> list[Row]:
        rows: list[Row] = await self._run("fetch", query, args, on, keep)
        return rows

    async def fetchrow(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Row | None:
        row: Row | None = await self._run("fetchrow", query, args, on, keep)
        return row

    async def fetchval(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Any:
        return await self._run("fetchval", query, args, on, keep)

    async def execute(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                      keep: bool = False) -> None:
        await self._run("execute", query, args, on, keep)

    # --- several statements on one connection -------------------------------------------

    @contextlib.asynccontextmanager
    async def session(self, on: Executor | None = None, *,
                      keep: bool = False) -> AsyncIterator[Executor]:
        if on is not None:
            yield on
            return
        with translated(self.prefix, self.dsn):
            c = await self._checkout()
            plans = self._plans
            if plans is not None:
                plans.streak = 0
                if plans.generic:
                    try:
                        await plans.to_own(c)
                    except BaseException as exc:
                        await self._discard(c, isinstance(exc, asyncpg.InternalClientError))
                        raise
        executor = AsyncpgExecutor(c, self.prefix, self.dsn)
        try:
            yield executor
        except BaseException as exc:
            with translated(self.prefix, self.dsn):
                await self._discard(c, executor.broken
                                    or isinstance(exc, asyncpg.InternalClientError))
            raise
        with translated(self.prefix, self.dsn):
            if not (keep and self._keep(c)):
                await self.pool.release(c)

    # --- the kept connections ------------------------------------------------------------

    async def _checkout(self) -> Any:
        idle = self._idle
        while idle:
            c = idle.pop()
            if _usable(c):
                return c
            # A closed connection's slot goes back to the pool (a no-op when asyncpg
            # already took it back), which reconnects it on a later acquire.
            with contextlib.suppress(Exception):
                await self.pool.release(c)
        return await self.pool.acquire()

    def _keep(self, c: Any) -> bool:
        """Keep ``c`` (whose statement succeeded) for the next statement; False: release it."""
        if not self._linger or c.is_closed() or c.is_in_transaction():
            return False
        self._keep_idle(c)
        return True

    def _keep_idle(self, c: Any) -> None:
        self._idle.append(c)
        self._kept += 1
        if self._timer is None:
            # One timer per LINGER, not per statement: a timer (unlike call_soon) costs
            # the event loop no extra turn until it fires.
            self._timer = asyncio.get_running_loop().call_later(
                LINGER, self._on_linger, self._kept)

    def _on_linger(self, kept: int) -> None:
        self._timer = None
        if not self._idle:
            return
        if self._kept != kept:  # kept again since: look again in LINGER
            self._timer = asyncio.get_running_loop().call_later(
                LINGER, self._on_linger, self._kept)
            return
        idle, self._idle = self._idle, []
        self._run_ended()
        task = asyncio.get_running_loop().create_task(self._release(idle))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _release(self, conns: list[Any]) -> None:
        for c in conns:
            with contextlib.suppress(Exception):
                await self.pool.release(c)

    async def _return_idle(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        idle, self._idle = self._idle, []
        self._run_ended()
        await self._release(idle)
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)

    def _run_ended(self) -> None:
        """The kept connections went back to the pool: a run of inserts ends there, so
        the next insert, on whatever connection the pool lends, starts a new one
        (asyncpg_plans.py). Counted on, a lone insert every so often would switch a
        fresh connection to generic plans and back, two round trips for one insert."""
        if self._plans is not None:
            self._plans.streak = 0

    async def _discard(self, c: Any, broken: bool, pool: asyncpg.Pool | None = None) -> None:
        if pool is None:
            self._run_ended()
        if broken:
            c.terminate()  # back in the pool it fails every later use
        await (pool or self.pool).release(c)

    # --- dedicated sessions ---------------------------------------------------------------

    def _direct_dsn(self, what: str) -> str:
        """The DSN for a connection that must keep its session (LISTEN, session locks)."""
        if self.pooler and self.listen_dsn == self.dsn:
            raise ConfigError(
                f"{what} needs a direct connection to PostgreSQL, not the pooler: "
                "pass listen_dsn (--listen-dsn)"
            )
        return self.listen_dsn or ""

    def listener(self, channels: Mapping[str, str]) -> Listener:
        return AsyncpgListener(self._direct_dsn("LISTEN"), self.prefix, channels)

    def identity_lock(self, query: Query, args: Sequence[Any], *,
                      reclaim: Query | None = None, role: str = "lock") -> IdentityLock:
        return AsyncpgIdentityLock(self._direct_dsn("the worker identity lock"), self.prefix,
                                   query, args, reclaim, role=role)

    def maintenance(self, schema: str | None) -> Maintenance:
        """The queue's own vacuum (venturi/maintenance.py) on a session of its own."""
        return AsyncpgMaintenance(self._direct_dsn("the queue's vacuum"),
                                  self.prefix, schema)


__all__ = ["TRANSIENT_ERRORS", "AsyncpgDriver", "AsyncpgExecutor", "translate"]
