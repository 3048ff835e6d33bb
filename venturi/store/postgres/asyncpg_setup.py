"""How the asyncpg pool's sessions start and end: the settings each connection makes
when it opens, and the reset on release that a pool the store alone uses can skip.
AsyncpgDriver.connect builds its pools with these (asyncpg_driver.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg

from .driver import SESSION_SETTINGS


async def keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset hook that skips asyncpg's reset query, a round trip on every
    release. Safe because the store leaves no session state on pool connections:
    LISTEN and session locks live on dedicated connections, migrate() takes a
    transaction-scoped lock, and asyncpg itself still rolls back a transaction
    left open."""


def session_settings(dsn: str, pooler: bool,
                     wanted: Mapping[str, str] = SESSION_SETTINGS) -> dict[str, str] | None:
    """The settings each of the pool's connections makes when it opens:
    ``driver.SESSION_SETTINGS`` (``wanted``), less any the DSN sets itself
    (``?plan_cache_mode=auto`` keeps PostgreSQL's default). None behind a pooler
    (``--pooler``): a session setting would land on whichever server connection
    PgBouncer lent, and without a statement cache asyncpg sends unnamed statements,
    which PostgreSQL plans with their parameters every time anyway."""
    if pooler:
        return None
    try:
        given = parse_qs(urlsplit(dsn).query)
    except ValueError:
        given = {}
    return {k: v for k, v in wanted.items() if k not in given} or None


def session_setup(settings: Mapping[str, str] | None) -> Any:
    """The pool's ``init``: ``SET`` each setting once per new connection, a statement
    rather than a startup parameter, so that a PgBouncer in front (in session mode,
    without ``--pooler``) lets the connection through: PgBouncer refuses startup
    parameters it does not track. The names and values are venturi's constants."""
    if not settings:
        return None
    statement = "; ".join(f"SET {name} = {value}" for name, value in settings.items())

    async def init(conn: asyncpg.Connection) -> None:
        await conn.execute(statement)

    return init
