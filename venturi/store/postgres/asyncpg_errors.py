"""asyncpg's exceptions in venturi's tree (venturi/errors.py), translated once, here.

Losing the database is not a crash (docs/concepts/failures.md): anything that
means "the server is not there right now" becomes ``DatabaseUnavailable``, which
every service retries through; the rest is one clear line, with the DSN's
password masked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import asyncpg

from ...config import mask_dsn
from ...errors import DatabaseError, DatabaseUnavailable
from .sqlstates import from_server, line

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,
    # Left behind by a server session terminated mid-operation (asyncpg issue 1069):
    # the connection is stuck mid-protocol; the driver discards it, a new one works.
    asyncpg.InternalClientError,
)
DRIVER_ERRORS: tuple[type[Exception], ...] = (asyncpg.PostgresError, *TRANSIENT_ERRORS)


def translate(exc: BaseException, prefix: str, dsn: str | None = None) -> BaseException:
    """Map a driver exception to venturi's tree (one line, no secrets)."""
    where = f" ({mask_dsn(dsn)})" if dsn else ""
    if isinstance(exc, asyncpg.DataError):
        # A value the driver cannot encode: the caller's input, never transient.
        return DatabaseError(f"invalid query argument: {line(exc)}")
    if isinstance(exc, asyncpg.PostgresError):
        return from_server(exc.sqlstate or "", line(exc), prefix, where)
    if isinstance(exc, TRANSIENT_ERRORS):
        detail = line(exc) or type(exc).__name__
        return DatabaseUnavailable(f"database unavailable{where}: {detail}")
    return exc


@contextlib.contextmanager
def translated(prefix: str, dsn: str | None = None) -> Iterator[None]:
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise translate(exc, prefix, dsn) from None
