"""The queue's own vacuum on asyncpg (venturi/maintenance.py says what and why; the
statements are venturi/maintenance.sql)."""

from __future__ import annotations

import time

import asyncpg

from ...config import validate_prefix
from ...errors import ConfigError
from .._sql import _raw_blocks, quote_ident
from ..vacuum import MaintenanceState, TableHealth, VacuumPolicy, VacuumRun
from .asyncpg_errors import translate

# Every table whose rows come and go with the jobs: the job's own rows, its journal,
# its edges and workflow (gone with it), the finished counts and the rate log.
TABLES = ("jobs", "journal", "dependencies", "dependency_shards", "workflows", "tallies",
          "kind_starts")
_VACUUM_OPTIONS = {
    False: "INDEX_CLEANUP ON, SKIP_LOCKED, TRUNCATE false",
    True: "INDEX_CLEANUP ON, SKIP_LOCKED, TRUNCATE false, ANALYZE",
}


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
