"""The narrow interface PostgresStore's operations are written against.

The operations (``producing``, ``working``, ``inspecting``, ``administering``)
are written once: each binds a named statement's positional parameters, runs it
through a :class:`Driver`, and turns the rows into records (``rows``). A driver
carries statements to PostgreSQL and back and does nothing else:

- **statements** are :class:`~venturi.store._sql.Query` objects, one SQL text
  per operation with ``$n`` placeholders, sent as written (psycopg's
  ``RawCursor`` takes ``$n`` too): rewritten to another placeholder style, a
  ``$n`` that repeats would become several parameters, and PostgreSQL would no
  longer match a ``GROUP BY`` expression to its select-list twin;
- **values** go as bind parameters: JSON as text, cast to jsonb in the SQL, so
  no codec has to be configured on a caller's connection; jsonb columns come
  back as their JSON text; uuid, timestamptz, interval, arrays as the Python
  types (``UUID``, aware ``datetime``, ``timedelta``, ``list``);
- **rows** come back as indexable sequences, columns in the order selected;
- **errors** are translated before they leave the driver, into venturi's tree
  (``venturi.errors``): nothing above the driver sees a driver's exception;
- **connections**: a caller's own (``conn=``) is *adopted* and used as it is, in
  whatever transaction it has open, never committed or rolled back here; the
  driver's own come from its pool, one per statement or one per ``session``.
  ``keep=True`` is a hint that another statement of the same kind follows
  soon (an enqueue loop, a worker's next claim): a driver may keep that
  connection out of its pool for it instead of a pool round trip;
- **sessions**: LISTEN and the worker's identity lock hold a dedicated session
  of their own, never a pooled one (a pool's reset unlistens, and a session
  lock must outlive transactions).

``asyncpg_driver.AsyncpgDriver`` serves the asyncio store and the worker;
``psycopg_driver.PsycopgDriver`` is blocking and serves ``SyncQueue``. What a
caller may pass as ``conn=`` is decided in ``adoption``, whatever the pool's
driver. docs/design-notes.md says how another plugs in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from .._sql import Query
from ..base import IdentityLock, Listener

Row = Sequence[Any]

# Session settings of the connections the asyncpg driver opens for its own pool (never
# a caller's connection, never a pool the caller passed in). Drivers prepare their
# statements, and PostgreSQL may switch a prepared statement to a generic plan after
# five executions, costed on the table as it was then: on a new queue, a table of ten
# pages, for which the claim joins its picked ids back to the jobs table by a
# sequential scan. That plan is kept until the table's statistics change (VACUUM,
# ANALYZE), so where nothing vacuums every claim reads the whole, growing table.
# Planning every execution with its parameters costs a little on each statement and
# keeps the claim, the settle, the renewal and the retention delete on their indexes
# whatever the table's size (docs/operations/maintenance.md, "Plans that outlive the
# table they were made for"). The psycopg driver gets the same by preparing nothing. The
# statements marked ``-- prepared:`` read no table and may keep a generic plan: the psycopg
# driver prepares them, the asyncpg driver switches a kept connection for a run of them
# (asyncpg_plans.py).
SESSION_SETTINGS = {"plan_cache_mode": "force_custom_plan"}

# The settings of the connections a driver keeps for the statements marked ``-- plan:
# cached`` (the claim): their plan is made once per connection, generic, and kept. With
# sequential scans, hash joins and merge joins priced out, the only way left to join a
# few picked ids back to the jobs table is a nested loop over its primary key, which
# stays the cheapest at any size since the alternatives (a full scan of the table,
# rescanned or materialized) only get dearer as the table grows; so a plan made on an
# empty table is still right on a large one. The tier scans are bounded scans of the
# claim index under any plan (docs/operations/maintenance.md, "Plans that outlive the
# table they were made for"). Planning a claim costs more than running it on an idle
# queue, which is what a pickup waits for (benchmarks/results-pickup.md).
CACHED_PLAN_SETTINGS = {
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
}


def channels(prefix: str) -> dict[str, str]:
    """A queue's two worker channels by name, and the label a listener reports each
    under (venturi/notices.py says what travels on them)."""
    return {f"{prefix}jobs": "jobs", f"{prefix}control": "control"}


def results_channel(prefix: str) -> dict[str, str]:
    """The channel ``Queue.result`` listens on, labelled ``finished``: the ids of jobs
    that just finished (venturi/notices.py)."""
    return {f"{prefix}results": "finished"}


class Executor(Protocol):
    """Statements on one connection, errors already translated."""

    async def fetch(self, query: Query, args: Sequence[Any]) -> list[Row]: ...

    async def fetchrow(self, query: Query, args: Sequence[Any]) -> Row | None: ...

    async def fetchval(self, query: Query, args: Sequence[Any]) -> Any: ...

    async def execute(self, query: Query, args: Sequence[Any]) -> None: ...

    async def script(self, sql: str) -> None:
        """Run several statements with no parameters (a migration)."""

    async def copy(self, schema: str | None, table: str, columns: Sequence[str],
                   records: Iterable[Sequence[Any]]) -> None:
        """COPY ``records`` into ``schema.table``'s ``columns``."""

    def atomic(self, savepoint: str) -> AbstractAsyncContextManager[None]:
        """All or nothing: a transaction, or a savepoint named ``savepoint`` inside the
        one already open (a caller's, begun however it was)."""


class Driver(Protocol):
    """A pool of connections to one database, and the caller's connections adopted."""

    def adopt(self, conn: Any) -> Executor:
        """An executor on a caller's connection (``conn=``)."""

    def session(self, on: Executor | None = None, *,
                keep: bool = False) -> AbstractAsyncContextManager[Executor]:
        """Several statements on one connection: ``on`` if given, else one of the pool's."""

    async def fetch(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                    keep: bool = False) -> list[Row]:
        """One statement on ``on``, else on a pooled connection; likewise below."""

    async def fetchrow(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Row | None: ...

    async def fetchval(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                       keep: bool = False) -> Any: ...

    async def execute(self, query: Query, args: Sequence[Any], *, on: Executor | None = None,
                      keep: bool = False) -> None: ...

    def listener(self, channels: Mapping[str, str]) -> Listener:
        """LISTEN on ``channels`` (channel name -> the label ``receive`` reports)."""

    def identity_lock(self, query: Query, args: Sequence[Any], *,
                      reclaim: Query | None = None, role: str = "lock") -> IdentityLock:
        """A lock taken by ``query`` (a try-lock returning whether it got it) on a
        dedicated session, held until that session ends. ``reclaim`` (the earlier
        holding session's backend pid, then ``args``) ends that session of this lock's
        own, when it still holds the lock after its connection was lost. ``role``
        names the session (``venturi <role>``, _connect.named)."""

    async def close(self) -> None: ...
