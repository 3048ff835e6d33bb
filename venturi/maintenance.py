"""The queue's own vacuum, for servers where autovacuum is off or falls behind.

Every job leaves dead row versions behind (claim, settle, the retention delete) and,
more harmful, a dead entry in the claim index: the claim's index scan starts at the
oldest entry of its tier and walks every page of dead entries before the first
runnable row, so without VACUUM each claim costs more than the last
(docs/operations/maintenance.md has the mechanism and the figures). PostgreSQL's
autovacuum removes them when it runs; this module does it when it does not.

``vacuum_if_needed`` looks at the queue's two tables once: a table is vacuumed when
its dead row versions exceed ``dead_tuples + dead_fraction x live`` and, if
autovacuum is meant to visit it, no vacuum has finished for ``quiet_for``. One
worker of a queue does it at a time (a try-lock; the others skip). The VACUUM always
cleans the indexes (``INDEX_CLEANUP ON``: the claim index is the point), skips a
table someone else is vacuuming (``SKIP_LOCKED``) and never truncates the table
(``TRUNCATE false``: truncation takes an exclusive lock the claimers would queue
behind). A vacuum that could remove nothing because an old snapshot holds back the
xmin horizon is reported with the holder, and not repeated while the horizon stands.

It needs a connection of its own: not in a transaction (VACUUM cannot run in one),
not through a transaction-mode pooler (the try-lock is a session lock), owned by or
granted the tables' owner role (VACUUM skips other tables with a warning).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg

from .config import validate_prefix
from .errors import ConfigError
from .store._sql import _raw_blocks, quote_ident
from .store.postgres import translate

TABLES = ("jobs", "journal")
_VACUUM_OPTIONS = {
    False: "INDEX_CLEANUP ON, SKIP_LOCKED, TRUNCATE false",
    True: "INDEX_CLEANUP ON, SKIP_LOCKED, TRUNCATE false, ANALYZE",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class VacuumPolicy:
    """When the queue vacuums its own tables.

    ``interval``: how often a worker looks (the caller's loop sleeps it).
    ``dead_tuples``, ``dead_fraction``: vacuum once ``n_dead_tup`` exceeds
    ``dead_tuples + dead_fraction * n_live_tup`` (autovacuum's own rule, with
    thresholds for a queue: at 3,000 jobs/s a table gains ~9,000 dead versions a second).
    ``quiet_for``: where autovacuum is on for the table, first give it this long
    since the last vacuum (``last_vacuum``/``last_autovacuum``).
    ``analyze``: also ANALYZE when that many rows changed since the last analyze
    (autovacuum off means auto-analyze off too); 0 never.
    """

    interval: timedelta = timedelta(seconds=10)
    dead_tuples: int = 20_000
    dead_fraction: float = 0.1
    quiet_for: timedelta = timedelta(seconds=30)
    analyze: int = 100_000

    def __post_init__(self) -> None:
        if self.interval <= timedelta(0) or self.quiet_for < timedelta(0):
            raise ConfigError("maintenance interval must be positive and quiet_for not negative")
        if self.dead_tuples < 0 or not 0 <= self.dead_fraction <= 1 or self.analyze < 0:
            raise ConfigError("maintenance thresholds must not be negative (fraction at most 1)")

    def over(self, health: TableHealth) -> bool:
        """Whether the table holds more dead row versions than the policy allows."""
        return health.dead > self.dead_tuples + self.dead_fraction * health.live

    def due(self, health: TableHealth) -> str | None:
        """Why ``health``'s table should be vacuumed now, or None."""
        if not self.over(health):
            return None
        quiet = self.quiet_for.total_seconds()
        if health.autovacuum and health.since_vacuum is not None and health.since_vacuum < quiet:
            return None  # autovacuum is keeping up
        if health.autovacuum:
            return "autovacuum-behind"
        return "autovacuum-off"


@dataclass(frozen=True, slots=True)
class TableHealth:
    name: str
    dead: int
    live: int
    modified: int
    since_vacuum: float | None  # seconds; None: never vacuumed
    since_analyze: float | None
    autovacuum: bool
    may_vacuum: bool


@dataclass(frozen=True, slots=True)
class VacuumRun:
    """One table looked at: vacuumed (``seconds``), or ``skipped`` with the reason."""

    table: str
    reason: str
    dead_before: int
    dead_after: int | None = None
    seconds: float = 0.0
    analyzed: bool = False
    skipped: str | None = None
    horizon: str | None = None  # who held the xmin horizon, when nothing could be removed

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass
class MaintenanceState:
    """What one worker remembers between looks: the horizon that made a vacuum futile,
    per table, so it is not repeated until the horizon moves."""

    blocked: dict[str, str] = field(default_factory=dict)


def _queries() -> dict[str, str]:
    return _raw_blocks("venturi")  # venturi/maintenance.sql


def table_names(prefix: str, schema: str | None = None) -> list[str]:
    """The queue's tables as VACUUM and ``::regclass`` take them."""
    validate_prefix(prefix)
    qualify = f"{quote_ident(schema)}." if schema else ""
    return [f"{qualify}{prefix}{t}" for t in TABLES]


async def table_health(conn: asyncpg.Connection, prefix: str,
                       schema: str | None = None) -> list[TableHealth]:
    return await _health(conn, table_names(prefix, schema))


async def _health(conn: asyncpg.Connection, names: list[str]) -> list[TableHealth]:
    rows = await conn.fetch(_queries()["table_health"], names)
    return [TableHealth(
        name=r["name"], dead=r["dead"], live=r["live"], modified=r["modified"],
        since_vacuum=None if r["since_vacuum"] is None else float(r["since_vacuum"]),
        since_analyze=None if r["since_analyze"] is None else float(r["since_analyze"]),
        autovacuum=r["autovacuum"], may_vacuum=r["may_vacuum"]) for r in rows]


async def _horizon(conn: asyncpg.Connection) -> tuple[str, str] | None:
    """The xmin that holds back the horizon, and who holds it."""
    row = await conn.fetchrow(_queries()["oldest_snapshot"])
    if row is None:
        return None
    age = "" if row["seconds"] is None else f", {row['seconds']:.0f} s"
    return row["xmin"], f"{row['what']} ({row['xid_age']} transactions old{age})"


async def vacuum_if_needed(conn: asyncpg.Connection, prefix: str,
                           policy: VacuumPolicy | None = None, *, schema: str | None = None,
                           state: MaintenanceState | None = None) -> list[VacuumRun]:
    """Vacuum whichever of the queue's tables needs it, unless another worker of the
    queue is at it (then: ``[]``). ``conn`` must be outside a transaction, on a direct
    connection. Driver errors come out translated (``DatabaseUnavailable``, ...)."""
    policy = policy or VacuumPolicy()
    state = state if state is not None else MaintenanceState()
    validate_prefix(prefix)
    if conn.is_in_transaction():
        raise ConfigError("the maintenance connection is in a transaction: VACUUM cannot run"
                          " inside a transaction block")
    q = _queries()
    try:
        if not await conn.fetchval(q["maintenance_lock"], prefix):
            return []
        try:
            return [await _one(conn, h, policy, state)
                    for h in await table_health(conn, prefix, schema)
                    if policy.due(h) is not None]
        finally:
            await conn.fetchval(q["maintenance_unlock"], prefix)
    except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
        raise translate(exc, prefix) from None


async def _one(conn: asyncpg.Connection, health: TableHealth, policy: VacuumPolicy,
               state: MaintenanceState) -> VacuumRun:
    reason = policy.due(health) or ""
    if not health.may_vacuum:
        return VacuumRun(health.name, reason, health.dead, skipped="not-owner")
    blocked_by = state.blocked.get(health.name)
    if blocked_by is not None:
        held = await _horizon(conn)
        if held is not None and held[0] == blocked_by:
            return VacuumRun(health.name, reason, health.dead, skipped="horizon-held",
                             horizon=held[1])
        del state.blocked[health.name]
    analyze = policy.analyze > 0 and health.modified >= policy.analyze
    started = time.monotonic()
    # The one splice: the table's name as PostgreSQL printed it (regclass, quoted where
    # needed) from the validated prefix; VACUUM takes no bind parameters.
    await conn.execute(f"VACUUM ({_VACUUM_OPTIONS[analyze]}) {health.name}")
    seconds = time.monotonic() - started
    (after,) = await _health(conn, [health.name])
    if after.since_vacuum is None or after.since_vacuum > seconds + 1:
        # SKIP_LOCKED: autovacuum (or someone's VACUUM) holds the table right now.
        return VacuumRun(health.name, reason, health.dead, skipped="locked")
    horizon = None
    if policy.over(after):
        # Too little was removable: the dead versions are younger than someone's
        # snapshot. Say whose, and wait for it to move before trying again.
        held = await _horizon(conn)
        if held is not None:
            state.blocked[health.name], horizon = held
    return VacuumRun(health.name, reason, health.dead, after.dead, seconds, analyze,
                     horizon=horizon)

