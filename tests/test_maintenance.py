"""The queue's own vacuum (venturi/maintenance.py): it vacuums a table that holds too
many dead row versions, one worker at a time, never inside a transaction, and says who
holds back the xmin horizon when a vacuum could remove nothing.

Each test has a database of its own on the test server: what VACUUM may remove depends
on the snapshots of every session of the database, and the shared ``test`` database
has other suites' transactions coming and going. Autovacuum is off for the two tables,
so nothing else vacuums them meanwhile."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from tests.conftest import fresh_database
from venturi import ConfigError, Queue
from venturi.maintenance import (
    MaintenanceState,
    TableHealth,
    VacuumPolicy,
    table_health,
    vacuum_if_needed,
)

PREFIX = "q_"
EAGER = VacuumPolicy(dead_tuples=50, dead_fraction=0.0, analyze=0, min_gap=timedelta(0))


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[str]:
    """A fresh database on the test server, migrated for prefix ``q_``; its DSN."""
    async with fresh_database(pg_dsn, "venturi_maint") as (dsn, _):
        async with Queue.connect(dsn, prefix=PREFIX, max_size=2) as queue:
            await queue.migrate()
        conn = await asyncpg.connect(dsn)
        try:  # whatever the server's setting: nothing but the tests vacuums these tables
            for table in ("jobs", "journal"):
                await conn.execute(f"ALTER TABLE {PREFIX}{table} SET (autovacuum_enabled = false)")
        finally:
            await conn.close()
        yield dsn


@pytest.fixture
async def conn(db: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(db)
    try:
        yield c
    finally:
        await c.close()


async def _churn(conn: asyncpg.Connection, prefix: str, rows: int = 200) -> None:
    """``rows`` dead versions in the jobs table, counted in the shared statistics."""
    await conn.execute(
        f"INSERT INTO {prefix}jobs (id, kind, payload)"
        " SELECT gen_random_uuid(), 'k', '{}' FROM generate_series(1, $1)", rows)
    await conn.execute(f"UPDATE {prefix}jobs SET run_count = run_count + 1")
    await conn.execute("SELECT pg_stat_force_next_flush()")


async def _jobs(conn: asyncpg.Connection, prefix: str) -> TableHealth:
    return (await table_health(conn, prefix))[0]


async def test_vacuums_a_table_with_dead_versions_and_only_that_one(
    conn: asyncpg.Connection,
) -> None:
    prefix = PREFIX
    await _churn(conn, prefix)
    before = await _jobs(conn, prefix)
    assert before.dead >= 200 and before.since_vacuum is None and not before.autovacuum
    (run,) = await vacuum_if_needed(conn, prefix, EAGER)
    assert run.table.endswith(f"{prefix}jobs") and run.reason == "autovacuum-off"
    assert run.skipped is None and run.horizon is None
    assert run.dead_before >= 200 and run.dead_after == 0
    after = await _jobs(conn, prefix)
    assert after.since_vacuum is not None and after.dead == 0
    # Nothing left to do: nothing is vacuumed again.
    assert await vacuum_if_needed(conn, prefix, EAGER) == []


async def test_analyzes_too_once_enough_rows_changed(conn: asyncpg.Connection) -> None:
    await _churn(conn, PREFIX)
    policy = VacuumPolicy(dead_tuples=50, dead_fraction=0.0, analyze=100)
    (run,) = await vacuum_if_needed(conn, PREFIX, policy)
    assert run.analyzed and run.skipped is None
    assert (await _jobs(conn, PREFIX)).since_analyze is not None


async def test_below_the_threshold_nothing_runs(conn: asyncpg.Connection) -> None:
    await _churn(conn, PREFIX)
    assert await vacuum_if_needed(conn, PREFIX, VacuumPolicy(dead_tuples=10_000)) == []
    assert (await _jobs(conn, PREFIX)).since_vacuum is None


async def test_one_worker_at_a_time(conn: asyncpg.Connection, db: str) -> None:
    prefix = PREFIX
    await _churn(conn, prefix)
    other = await asyncpg.connect(db)
    try:
        assert await other.fetchval(
            "SELECT pg_try_advisory_lock(hashtextextended('venturi:maintenance:' || $1, 0))",
            prefix)
        assert await vacuum_if_needed(conn, prefix, EAGER) == []  # the other one is at it
        assert (await _jobs(conn, prefix)).since_vacuum is None
    finally:
        await other.close()  # its session lock goes with it
    assert [r.skipped for r in await vacuum_if_needed(conn, prefix, EAGER)] == [None]
    # And the lock was released after the run: another session may take it.
    assert await conn.fetchval(
        "SELECT pg_try_advisory_lock(hashtextextended('venturi:maintenance:' || $1, 0))", prefix)


async def test_an_old_snapshot_is_named_and_not_fought(
    conn: asyncpg.Connection, db: str
) -> None:
    prefix = PREFIX
    holder = await asyncpg.connect(db, server_settings={"application_name": "old-report"})
    state = MaintenanceState()
    try:
        tx = holder.transaction(isolation="repeatable_read")
        await tx.start()
        await holder.fetchval("SELECT 1")  # the snapshot is taken: nothing newer is removable
        await _churn(conn, prefix)
        (run,) = await vacuum_if_needed(conn, prefix, EAGER, state=state)
        assert run.skipped is None and run.dead_after is not None and run.dead_after >= 200
        assert run.horizon is not None and "old-report" in run.horizon
        # While the horizon stands, the next look does not vacuum again.
        (again,) = await vacuum_if_needed(conn, prefix, EAGER, state=state)
        assert again.skipped == "horizon-held" and "old-report" in (again.horizon or "")
        await tx.rollback()
    finally:
        await holder.close()
    (freed,) = await vacuum_if_needed(conn, prefix, EAGER, state=state)
    assert freed.skipped is None and freed.dead_after == 0 and freed.horizon is None


async def test_never_inside_a_transaction(conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        with pytest.raises(ConfigError, match="transaction"):
            await vacuum_if_needed(conn, PREFIX, EAGER)


def _health(dead: int, live: int, since: float | None, autovacuum: bool) -> TableHealth:
    return TableHealth("t", dead, live, 0, since, None, autovacuum, True)


def test_the_policy_waits_for_autovacuum_only_where_it_runs() -> None:
    policy = VacuumPolicy(dead_tuples=1000, dead_fraction=0.1,
                          quiet_for=timedelta(seconds=30))
    assert policy.due(_health(1000 + 100, 1000, None, autovacuum=False)) is None  # not over
    assert policy.due(_health(1101, 1000, 5.0, autovacuum=False)) == "autovacuum-off"
    assert policy.due(_health(1101, 1000, 5.0, autovacuum=True)) is None  # it visited lately
    assert policy.due(_health(1101, 1000, 31.0, autovacuum=True)) == "autovacuum-behind"
    assert policy.due(_health(1101, 1000, None, autovacuum=True)) == "autovacuum-behind"


def test_a_table_just_vacuumed_is_left_alone_whoever_asks() -> None:
    """``min_gap``: the statistics every worker reads say when the table was last
    vacuumed, so a queue's VACUUMs are bounded however many workers look."""
    policy = VacuumPolicy(dead_tuples=1000, dead_fraction=0.0, min_gap=timedelta(seconds=5))
    assert policy.due(_health(5000, 0, 4.0, autovacuum=False)) is None
    assert policy.due(_health(5000, 0, 6.0, autovacuum=False)) == "autovacuum-off"
    assert VacuumPolicy().min_gap == timedelta(seconds=5)


@pytest.mark.parametrize("bad", [
    {"interval": timedelta(0)}, {"dead_tuples": -1}, {"dead_fraction": 1.5},
    {"quiet_for": timedelta(seconds=-1)}, {"analyze": -1}, {"min_gap": timedelta(seconds=-1)},
])
def test_a_bad_policy_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        VacuumPolicy(**bad)  # type: ignore[arg-type]
