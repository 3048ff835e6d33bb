"""The PostgreSQL store: operations written once against a driver, and the asyncpg driver.

Layout: ``store`` (PostgresStore, migrate, sessions), the operation groups
``producing``, ``working``, ``inspecting`` and ``administering`` over
``operations`` (their shared plumbing), ``rows`` (rows to records), ``driver``
(the interface a driver implements), ``asyncpg_driver``, ``asyncpg_errors`` and
``asyncpg_sessions`` (the asyncpg implementation), and the named statements in
``*.sql``, loaded by ``venturi.store._sql``.
"""

from .asyncpg_driver import AsyncpgDriver
from .asyncpg_errors import translate
from .asyncpg_sessions import AsyncpgIdentityLock, AsyncpgListener
from .driver import channels
from .producing import COPY_MIN_ROWS
from .store import PostgresStore

# The names these classes had before the driver split.
PostgresListener = AsyncpgListener
PostgresIdentityLock = AsyncpgIdentityLock

__all__ = [
    "COPY_MIN_ROWS", "AsyncpgDriver", "AsyncpgIdentityLock", "AsyncpgListener",
    "PostgresIdentityLock", "PostgresListener", "PostgresStore", "channels", "translate",
]
