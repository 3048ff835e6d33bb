"""A ``driver.Driver`` on Django's own database connection.

Every statement runs on ``django.db.connections[alias]`` of the calling thread,
through the psycopg 3 connection Django holds (``connection.connection``): inside
``transaction.atomic()`` it joins Django's transaction and commits or rolls back
with it; outside one, Django's connection is in autocommit mode and a statement
commits on its own (docs/integrations/django.md). The SQL, its parameters and the
error translation are the psycopg driver's (``psycopg_executors``); only where the
connection comes from differs.

Django registers loaders of its own on that connection; one matters here: with
``USE_TZ = False`` it loads ``timestamptz`` as naive datetimes. venturi's rows are
read with psycopg's stock loader instead, so they are aware whatever the setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.types.datetime import TimestamptzLoader

from ...errors import ConfigError
from ...store._sql import Query
from ...store.base import IdentityLock, Listener
from ...store.postgres.driver import Executor, Row
from ...store.postgres.psycopg_errors import translate
from ...store.postgres.psycopg_executors import PsycopgExecutor, check_usable, cursor

WORKER_ONLY = ("runs in the worker (venturi worker --django), not on Django's "
               "request connection")


def raw_connection(alias: str) -> psycopg.Connection[Any]:
    """The psycopg 3 connection behind Django's connection ``alias`` in this thread,
    opened if Django has not opened it yet."""
    wrapper = connections[alias]
    return raw_of(wrapper)


def raw_of(wrapper: BaseDatabaseWrapper) -> psycopg.Connection[Any]:
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"venturi needs a PostgreSQL database; DATABASES[{wrapper.alias!r}] is "
            f"{wrapper.vendor}")
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise ImproperlyConfigured(
            f"venturi writes on Django's connection through psycopg 3, and "
            f"DATABASES[{wrapper.alias!r}] runs on {type(raw).__module__.split('.')[0]}: "
            "install psycopg 3 (pip install 'venturi[django]'); Django prefers it to psycopg2")
    return raw


class DjangoExecutor(PsycopgExecutor):
    """PsycopgExecutor on Django's connection, reading timestamps as aware datetimes."""

    __slots__ = ()

    def _run(self, query: Query, args: Sequence[Any]) -> psycopg.RawCursor[Any]:
        cur = cursor(self.conn, args)
        cur.adapters.register_loader("timestamptz", TimestamptzLoader)
        try:
            return cur.execute(query.sql, args)
        except psycopg.Error as exc:
            raise translate(exc, self._prefix) from None


class DjangoDriver:
    """Statements on Django's connection ``alias``, whichever thread calls."""

    def __init__(self, alias: str, *, prefix: str) -> None:
        self.alias = alias
        self.prefix = prefix

    def _own(self) -> Executor:
        raw = raw_connection(self.alias)
        check_usable(raw)
        return DjangoExecutor(raw, self.prefix)

    def adopt(self, conn: Any) -> Executor:
        """``conn=``: a Django connection (``django.db.connections[...]``) or the
        psycopg connection behind one."""
        if isinstance(conn, BaseDatabaseWrapper):
            conn = raw_of(conn)
        if not isinstance(conn, psycopg.Connection):
            raise TypeError("conn= takes a Django database connection "
                            f"(django.db.connections[alias]), not {type(conn).__name__}")
        check_usable(conn)
        return DjangoExecutor(conn, self.prefix)

    async def fetch(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                    keep: bool = False) -> list[Row]:
        return await (on or self._own()).fetch(query, args)

    async def fetchrow(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Row | None:
        return await (on or self._own()).fetchrow(query, args)

    async def fetchval(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Any:
        return await (on or self._own()).fetchval(query, args)

    async def execute(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                      keep: bool = False) -> None:
        await (on or self._own()).execute(query, args)

    @contextlib.asynccontextmanager
    async def session(self, on: Executor | None = None, *,
                      keep: bool = False) -> AsyncIterator[Executor]:
        yield on or self._own()

    def listener(self, channels: Mapping[str, str]) -> Listener:
        raise ConfigError(f"listening for notifications {WORKER_ONLY}")

    def identity_lock(self, query: Query, args: Sequence[Any], *,
                      reclaim: Query | None = None, role: str = "lock") -> IdentityLock:
        raise ConfigError(f"the worker identity lock {WORKER_ONLY}")

    async def close(self) -> None:
        """Django owns the connection: nothing to close."""
