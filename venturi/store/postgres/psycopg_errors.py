"""psycopg's exceptions in venturi's tree (venturi/errors.py), translated once, here.

As with asyncpg (``asyncpg_errors``): an error the server sent is mapped by its
SQLSTATE (``sqlstates``); one psycopg raised itself without a SQLSTATE is a lost
or refused connection (``OperationalError``, ``InterfaceError``: transient, see
docs/concepts/failures.md) or a value it could not send (the caller's input).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg

from ...config import mask_dsn
from ...errors import DatabaseError, DatabaseUnavailable
from .sqlstates import from_server, line


def translate(exc: psycopg.Error, prefix: str, dsn: str | None = None) -> Exception:
    """Map a psycopg exception to venturi's tree (one line, no secrets)."""
    where = f" ({mask_dsn(dsn)})" if dsn else ""
    if exc.sqlstate:
        return from_server(exc.sqlstate, line(exc), prefix, where)
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        detail = line(exc) or type(exc).__name__
        return DatabaseUnavailable(f"database unavailable{where}: {detail}")
    return DatabaseError(f"invalid query argument: {line(exc)}")


@contextlib.contextmanager
def translated(prefix: str, dsn: str | None = None) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        raise translate(exc, prefix, dsn) from None
