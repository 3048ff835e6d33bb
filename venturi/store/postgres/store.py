"""PostgresStore: the storage contract on PostgreSQL, through a driver.

The operations are grouped by concern (``producing``, ``working``,
``inspecting``, ``administering``), written once against ``driver.Driver``;
``connect`` builds the asyncpg one. Driver errors are translated inside the
driver, once, into venturi's exception tree: no code above the store catches an
asyncpg exception.
"""

from __future__ import annotations

import datetime as dt

import asyncpg

from ...config import validate_prefix
from ...errors import ConfigError
from .. import _sql
from ..base import Clock, DatabaseClock, IdentityLock, Listener, Maintenance, Store
from .administering import Administering
from .asyncpg_driver import AsyncpgDriver
from .driver import Driver, channels, results_channel
from .flowing import Flowing
from .inspecting import Inspecting
from .producing import Producing
from .working import Working


class PostgresStore(Producing, Working, Flowing, Inspecting, Administering, Store):
    """The production store. Build it with :meth:`connect` (asyncpg), or around a
    driver of your own (``driver.Driver``)."""

    def __init__(self, driver: Driver, *, prefix: str, clock: Clock | None = None,
                 schema: str | None = None) -> None:
        self.prefix = validate_prefix(prefix)
        self.driver = driver
        self.clock = clock or DatabaseClock()
        # Where migrate creates the tables; every statement names it, so a caller's
        # connection (conn=) works whatever its search_path.
        self.schema = schema
        self._q = _sql.queries(self.prefix, schema)
        self._tight: set[tuple[str, ...]] = set()  # Flowing.claim_limited's memo

    @classmethod
    def from_pool(cls, pool: asyncpg.Pool, *, prefix: str, clock: Clock | None = None,
                  schema: str | None = None) -> PostgresStore:
        """A store on an asyncpg pool the caller owns (and closes)."""
        return cls(AsyncpgDriver(pool, prefix=validate_prefix(prefix)), prefix=prefix,
                   clock=clock, schema=schema)

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        prefix: str = "venturi_",
        min_size: int = 1,
        max_size: int = 10,
        pooler: bool = False,
        listen_dsn: str | None = None,
        clock: Clock | None = None,
        connect_timeout: float = 10.0,
    ) -> PostgresStore:
        """Open a pool. ``pooler=True`` turns the statement cache off, for
        PgBouncer in transaction mode (pass ``listen_dsn`` to reach PostgreSQL
        directly for LISTEN)."""
        validate_prefix(prefix)
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError("no database DSN given: set --dsn or VENTURI_DSN")
        driver, schema = await AsyncpgDriver.connect(
            dsn, prefix=prefix, min_size=min_size, max_size=max_size, pooler=pooler,
            listen_dsn=listen_dsn, connect_timeout=connect_timeout)
        return cls(driver, prefix=prefix, clock=clock, schema=schema)

    async def close(self) -> None:
        await self.driver.close()

    # asyncpg's pool and connection settings, for tests and the worker's --listen-dsn.

    @property
    def _asyncpg(self) -> AsyncpgDriver:
        if not isinstance(self.driver, AsyncpgDriver):
            raise AttributeError("this store's driver is not asyncpg's")
        return self.driver

    @property
    def pool(self) -> asyncpg.Pool:
        return self._asyncpg.pool

    @property
    def dsn(self) -> str | None:
        return self._asyncpg.dsn

    @property
    def listen_dsn(self) -> str | None:
        return self._asyncpg.listen_dsn

    @listen_dsn.setter
    def listen_dsn(self, value: str | None) -> None:
        self._asyncpg.listen_dsn = value

    # --- schema ------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations in one transaction under a transaction-scoped
        lock: a session lock would be taken on one pooled server connection and
        released on another behind PgBouncer in transaction mode."""
        applied: list[str] = []
        async with self.driver.session() as ex, ex.atomic("venturi_migrate"):
            await self._execute("migrate_lock", self.prefix, on=ex)
            await self._execute("migrations_table", on=ex)
            done = {r[0] for r in await self._fetch("applied_migrations", on=ex)}
            for version, name, raw in _sql.migrations():
                if version in done:
                    continue
                await ex.script(_sql.render_migration(raw, self.prefix))
                await self._execute("record_migration", version, name, on=ex)
                applied.append(name)
        return applied

    # --- time, sessions -----------------------------------------------------------------

    async def db_now(self) -> dt.datetime:
        now = self.clock.now()
        if now is not None:
            return now
        result: dt.datetime = await self._val("db_now")
        return result

    def listen(self) -> Listener:
        return self.driver.listener(channels(self.prefix))

    def listen_finished(self) -> Listener:
        return self.driver.listener(results_channel(self.prefix))

    def identity_lock(self, name: str) -> IdentityLock:
        q, args = self._bind("identity_lock", (self.prefix, name))
        return self.driver.identity_lock(q, args, reclaim=self._q["identity_reclaim"],
                                         role=f"lock {name}")


    def maintenance(self) -> Maintenance | None:
        """The queue's own vacuum, on a direct session (asyncpg's driver; the
        others serve producers and have nothing to vacuum with)."""
        if not isinstance(self.driver, AsyncpgDriver):
            return None
        return self.driver.maintenance(self.schema)
