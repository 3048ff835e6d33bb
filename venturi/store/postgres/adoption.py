"""What ``conn=`` accepts: a caller's connection, recognised and wrapped as an ``Executor``.

The statements then run on that connection, in whatever transaction it has open
(docs/integrations/producers.md). Which objects are accepted depends on the
queue, not on the driver of its own pool: an asyncio ``Queue`` takes an
asyncpg ``Connection`` (a pooled one too), a psycopg ``AsyncConnection``, or a
SQLAlchemy ``AsyncConnection``/``AsyncSession`` on either driver; a
``SyncQueue`` takes a psycopg ``Connection`` or a SQLAlchemy
``Connection``/``Session`` on psycopg. Anything else is a ``TypeError`` here,
before any statement is sent.

The optional libraries are looked up in ``sys.modules``: an object of a library
that was never imported cannot be one of its connections, so recognising one
costs no import.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import asyncpg

from ...errors import DatabaseError
from .asyncpg_executor import AsyncpgExecutor
from .driver import Executor
from .sqlstates import CLOSED

ASYNC_ACCEPTED = ("an asyncpg Connection, a psycopg AsyncConnection, or a SQLAlchemy "
                  "AsyncConnection or AsyncSession")
BLOCKING_ACCEPTED = "a psycopg Connection, or a SQLAlchemy Connection or Session"


def _module(name: str) -> Any:
    return sys.modules.get(name)


def _is_blocking(conn: Any) -> bool:
    psycopg, orm, engine = (_module("psycopg"), _module("sqlalchemy.orm"),
                            _module("sqlalchemy.engine"))
    return bool((psycopg and isinstance(conn, psycopg.Connection))
                or (orm and isinstance(conn, orm.Session))
                or (engine and isinstance(conn, engine.Connection)))


def _is_async(conn: Any) -> bool:
    psycopg, sa_async = _module("psycopg"), _module("sqlalchemy.ext.asyncio")
    return bool(isinstance(conn, asyncpg.Connection)
                or (psycopg and isinstance(conn, psycopg.AsyncConnection))
                or (sa_async
                    and isinstance(conn, sa_async.AsyncConnection | sa_async.AsyncSession)))


_LAZY: dict[str, Any] = {}


def _lazy(name: str) -> Any:
    """This package's module ``name``, imported on first use (psycopg and SQLAlchemy are
    optional): an ``import`` statement in the function that runs on every ``conn=``
    call cost it more than the rest of the adoption."""
    try:
        return _LAZY[name]
    except KeyError:
        module = _LAZY[name] = importlib.import_module(f"{__package__}.{name}")
        return module


def refuse(conn: Any, accepted: str, hint: str = "") -> TypeError:
    return TypeError(f"conn= takes {accepted}, not {type(conn).__module__}.{type(conn).__name__}"
                     + hint)


# What each type of caller connection is, once found: asyncpg's isinstance runs a
# Python ``__instancecheck__``, and ``conn=`` is looked at on every call. Only the
# types accepted are remembered (a type's answer cannot change).
_ASYNCPG, _PSYCOPG, _SQLALCHEMY = "asyncpg", "psycopg", "sqlalchemy"
_ASYNC_TYPES: dict[type, str] = {}


def _async_kind(conn: Any) -> str | None:
    if isinstance(conn, asyncpg.Connection):
        return _ASYNCPG
    psycopg = _module("psycopg")
    if psycopg is not None and isinstance(conn, psycopg.AsyncConnection):
        return _PSYCOPG
    sa_async = _module("sqlalchemy.ext.asyncio")
    if sa_async is not None and isinstance(conn, sa_async.AsyncConnection | sa_async.AsyncSession):
        return _SQLALCHEMY
    return None


def adopt_async(conn: Any, prefix: str, dsn: str | None) -> Executor:
    """An executor on a caller's connection for ``Queue`` (asyncio)."""
    kind = _ASYNC_TYPES.get(type(conn))
    if kind is None:
        kind = _async_kind(conn)
        if kind is None:
            hint = ": a synchronous connection goes to venturi.SyncQueue" \
                if _is_blocking(conn) else ""
            raise refuse(conn, ASYNC_ACCEPTED, hint)
        _ASYNC_TYPES[type(conn)] = kind
    if kind is _ASYNCPG:
        if conn.is_closed():
            raise DatabaseError(CLOSED)
        return AsyncpgExecutor(conn, prefix, dsn)
    if kind is _PSYCOPG:
        executor: Executor = _lazy("psycopg_executors").AsyncPsycopgExecutor.on(conn, prefix)
        return executor
    sqlalchemy = _lazy("sqlalchemy_adoption")
    found: Executor = (sqlalchemy.found_executor(conn, prefix, dsn)
                       or sqlalchemy.SQLAlchemyAsyncExecutor(conn, prefix, dsn))
    return found


def adopt_blocking(conn: Any, prefix: str, dsn: str | None) -> Executor:
    """An executor on a caller's connection for ``SyncQueue`` (blocking)."""
    psycopg = _module("psycopg")
    if psycopg is not None and isinstance(conn, psycopg.Connection):
        from .psycopg_executors import PsycopgExecutor, check_usable

        check_usable(conn)
        return PsycopgExecutor(conn, prefix)
    orm, engine = _module("sqlalchemy.orm"), _module("sqlalchemy.engine")
    if (orm is not None and isinstance(conn, orm.Session)) or (
            engine is not None and isinstance(conn, engine.Connection)):
        from .sqlalchemy_adoption import blocking_executor

        return blocking_executor(conn, prefix)
    hint = ": an asyncio connection goes to venturi.Queue" if _is_async(conn) else ""
    raise refuse(conn, BLOCKING_ACCEPTED, hint)
