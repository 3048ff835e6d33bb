"""A server's error, by its SQLSTATE, in venturi's tree (venturi/errors.py).

Every driver translates its own exceptions (``asyncpg_errors``,
``psycopg_errors``): what the driver itself raised (a lost socket, a value it
cannot encode) it maps alone; an error the server sent carries a SQLSTATE, and
those are mapped here, once, for every driver.
"""

from __future__ import annotations

from ...errors import (
    DatabaseConflict,
    DatabaseError,
    DatabaseUnavailable,
    InvalidJob,
    SchemaMissing,
)

# A statement rolled back for a reason of timing, to be run again: a race lost
# (serialization failure, deadlock detected), a lock waited for longer than the session's
# lock_timeout, a statement longer than its statement_timeout or cancelled by an operator
# (pg_cancel_backend; a terminated backend is class 57P, unavailable).
CONFLICT_STATES = ("40001", "40P01", "55P03", "57014")
# SQLSTATE classes of a server that is going away or not accepting connections.
TRANSIENT_CLASSES = ("08", "57P")
# The two states of a caller's connection (conn=) that no statement can use.
CLOSED = "conn= is closed: pass an open connection"
ABORTED = (
    "the transaction is aborted (a statement in it failed): roll it back, or back to a "
    "savepoint, before using it again"
)


def from_server(state: str, message: str, prefix: str, where: str) -> Exception:
    """The venturi error for SQLSTATE ``state``; ``where`` is `` (masked dsn)`` or empty.
    A ``DatabaseError`` carries the state as ``sqlstate``."""
    error = _from_server(state, message, prefix, where)
    if isinstance(error, DatabaseError) and state:
        error.sqlstate = state
    return error


def _from_server(state: str, message: str, prefix: str, where: str) -> Exception:
    if state == "42P01":
        return SchemaMissing(prefix)
    if state in ("28P01", "28000"):
        return DatabaseError(f"authentication failed{where}: check the user and password")
    if state == "3D000":
        return DatabaseError(f"database does not exist{where}: create it or fix the DSN")
    if state.startswith(TRANSIENT_CLASSES):
        return DatabaseUnavailable(f"database unavailable{where}: {message}")
    if state in CONFLICT_STATES:
        return DatabaseConflict(f"database conflict {state}: {message}")
    if state in ("22P05", "22021"):  # untranslatable character / bad encoding
        return InvalidJob(f"payload cannot be stored as jsonb ({message})")
    if state == "25P02":
        # Only a caller's connection (conn=) can be in this state: venturi's own
        # transactions end as soon as a statement in them fails.
        return DatabaseError(ABORTED)
    return DatabaseError(f"database error {state}: {message}")


def line(exc: BaseException) -> str:
    """The first line of an exception's text (drivers add hints and context below)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
