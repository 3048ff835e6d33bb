"""Schema migrations: idempotent, serialized across processes, the expected
catalog, CHECK constraints, and prefix validation before any SQL."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.conftest import drop_prefix, new_prefix
from tests.helpers import MIGRATIONS
from venturi import ConfigError, MemoryStore, Queue
from venturi.store import _sql
from venturi.store.postgres import PostgresStore

TABLES = {"jobs", "journal", "workers", "migrations", "tallies", "kinds", "kind_starts",
          "dependencies", "workflows", "dependency_shards"}
# Storage parameters (0001 and 0002_storage.sql): autovacuum after a small absolute
# churn on the two queue tables, room on the workers' pages for HOT heartbeats.
_CHURN = {
    ("autovacuum_vacuum_threshold", "1000"), ("autovacuum_vacuum_scale_factor", "0.02"),
    ("autovacuum_vacuum_insert_threshold", "1000"),
    ("autovacuum_vacuum_insert_scale_factor", "0.02"),
    ("autovacuum_analyze_threshold", "1000"), ("autovacuum_analyze_scale_factor", "0.02"),
    ("autovacuum_vacuum_cost_delay", "1"), ("autovacuum_vacuum_cost_limit", "2000"),
}
# 0006_tallies.sql: room on the tally's pages, each finishing statement updates a row.
TALLY_FILL = ("tallies", "fillfactor", "50")
SHARD_FILL = ("dependency_shards", "fillfactor", "50")  # 0008_workflows_fanin.sql
STORAGE = {("jobs", "fillfactor", "80"), ("workers", "fillfactor", "50"), TALLY_FILL,
           SHARD_FILL} | {
    (table, name, value) for table in ("jobs", "journal") for name, value in _CHURN} | {
    # 0010_storage_dependencies.sql: the tables that turn over with the jobs
    (table, name, value) for table in ("dependencies", "dependency_shards", "workflows")
    for name, value in _CHURN}
INDEXES = {
    "jobs_pkey", "jobs_claim", "jobs_expiry", "jobs_claimed_kind", "jobs_dedup",
    "jobs_finished", "jobs_dead", "jobs_subject", "jobs_periodic", "journal_pkey",
    "journal_job", "workers_pkey",
    "migrations_pkey", "tallies_pkey", "kinds_pkey", "kind_starts_window",
    "dependencies_pkey", "dependencies_job", "workflows_pkey",
    "dependency_shards_pkey",  # 0008_workflows_fanin.sql
}
CHECKS = {
    "jobs_priority", "jobs_status", "jobs_run_count", "jobs_failure_count", "jobs_max_failures",
    "jobs_claim_shape", "jobs_finish_shape", "journal_outcome", "tallies_status",
    "kinds_concurrency", "kinds_rate_count", "kinds_rate_period", "kinds_rate_shape",
    "kind_starts_n",
}


async def _catalog(conn: asyncpg.Connection, prefix: str) -> dict[str, Any]:
    """Every relation, index definition and constraint under ``prefix``."""
    rels = await conn.fetch(
        "SELECT c.relname, c.relkind::text FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND starts_with(c.relname, $1)", prefix)
    indexes = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes"
        " WHERE schemaname = current_schema() AND starts_with(indexname, $1)", prefix)
    constraints = await conn.fetch(
        "SELECT conname, contype::text, pg_get_constraintdef(oid) AS def FROM pg_constraint"
        " WHERE connamespace = current_schema()::regnamespace AND starts_with(conname, $1)",
        prefix)
    columns = await conn.fetch(
        "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND starts_with(table_name, $1)", prefix)
    options = await conn.fetch(
        "SELECT c.relname, o.option_name, o.option_value FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace,"
        " pg_options_to_table(c.reloptions) AS o"
        " WHERE n.nspname = current_schema() AND starts_with(c.relname, $1)", prefix)
    triggers = await conn.fetch(
        "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        " WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace"
        " AND starts_with(t.tgname, $1)", prefix)
    strip = len(prefix)
    return {
        "triggers": {(r["tgname"][strip:], r["relname"][strip:]) for r in triggers},
        "tables": {r["relname"][strip:] for r in rels if r["relkind"] == "r"},
        "indexes": {r["indexname"][strip:]: r["indexdef"] for r in indexes},
        "constraints": {r["conname"][strip:]: (r["contype"], r["def"]) for r in constraints},
        "columns": {(r["table_name"][strip:], r["column_name"], r["data_type"], r["is_nullable"])
                    for r in columns},
        "options": {(r["relname"][strip:], r["option_name"], r["option_value"]) for r in options},
    }


@pytest.fixture
async def fresh(pg_dsn: str) -> AsyncIterator[str]:
    prefix = new_prefix()
    try:
        yield prefix
    finally:
        await drop_prefix(pg_dsn, prefix)


async def test_migrate_creates_the_schema_once(pg_dsn: str, fresh: str) -> None:
    store = await PostgresStore.connect(pg_dsn, prefix=fresh)
    try:
        assert await store.migrate() == MIGRATIONS
        async with store.pool.acquire() as conn:
            before = await _catalog(conn, fresh)
            assert await store.migrate() == []
            assert await _catalog(conn, fresh) == before
            versions = await conn.fetch(f"SELECT version, name FROM {fresh}migrations")
    finally:
        await store.close()
    assert [tuple(r) for r in versions] == [(int(m[:4]), m) for m in MIGRATIONS]

    assert before["tables"] == TABLES
    assert set(before["indexes"]) == INDEXES
    assert {k for k, (t, _) in before["constraints"].items() if t == "c"} == CHECKS
    idx = before["indexes"]
    assert "(priority, visible_at, id) WHERE (status = 'pending'::text)" in idx["jobs_claim"]
    assert "(claim_expires_at) WHERE (status = 'claimed'::text)" in idx["jobs_expiry"]
    assert "UNIQUE" in idx["jobs_periodic"] and "periodic" in idx["jobs_periodic"]
    assert 'COLLATE "C"' in idx["jobs_subject"]
    assert "WHERE (finished_at IS NOT NULL)" in idx["jobs_finished"]
    assert "dedup_key" in idx["jobs_dedup"] and "WHERE" in idx["jobs_dedup"]
    # The journal follows its job by statement triggers, not a foreign key (0001_init.sql).
    assert not [k for k, (t, _) in before["constraints"].items() if t == "f"]
    assert before["triggers"] == {("jobs_journal_delete", "jobs"),
                                  ("jobs_journal_truncate", "jobs")} | {
        (f"jobs_tally_{event}", "jobs") for event in ("insert", "update", "delete", "truncate")
    } | {("jobs_dependencies_delete", "jobs"), ("jobs_follow_dependencies", "jobs"),
         ("jobs_follow_dependencies_delete", "jobs")}  # 0004_results.sql
    cols = {(t, c): (ty, n) for t, c, ty, n in before["columns"]}
    assert cols[("jobs", "id")] == ("uuid", "NO")
    assert cols[("jobs", "payload")] == ("jsonb", "NO")
    assert cols[("jobs", "priority")] == ("smallint", "NO")
    assert cols[("jobs", "max_failures")] == ("integer", "NO")
    assert cols[("journal", "id")] == ("bigint", "NO")
    assert before["options"] == STORAGE
    assert cols[("jobs", "trace_context")] == ("jsonb", "YES")  # 0005_trace.sql
    assert cols[("jobs", "result")] == ("jsonb", "YES")  # 0004_results.sql
    assert {c for t, c in cols if t == "jobs"} == {
        "id", "kind", "payload", "priority", "status", "created_at", "visible_at",
        "claim_expires_at", "claimed_by", "finished_at", "run_count", "failure_count",
        "max_failures", "carry", "dedup_key", "subject", "periodic", "trace_context",
        "limit_key",  # 0003_kinds.sql
        "result", "waiting", "has_dependents",  # 0004_results.sql
        "workflow_id",  # 0008_workflows_fanin.sql
        "awaited"}  # 0009_awaited.sql


async def test_concurrent_migrators_apply_once(pg_dsn: str, fresh: str) -> None:
    env = {**os.environ, "VENTURI_DSN": pg_dsn, "VENTURI_PREFIX": fresh}
    script = Path(sys.executable).with_name("venturi")
    command = [str(script)] if script.exists() else [
        sys.executable, "-c", "from venturi.cli import main; main()"]
    procs = [
        await asyncio.create_subprocess_exec(
            *command, "migrate", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for _ in range(4)
    ]
    outputs = [await asyncio.wait_for(p.communicate(), timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    lines = sorted(out.decode().strip() for out, _ in outputs)
    assert lines.count("\n".join(f"applied {m}" for m in MIGRATIONS)) == 1, lines
    assert sum("up to date" in line for line in lines) == 3, lines
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval(f"SELECT count(*) FROM {fresh}migrations") == len(MIGRATIONS)
        assert (await _catalog(conn, fresh))["tables"] == TABLES
    finally:
        await conn.close()


async def test_storage_parameters_keep_what_an_operator_set(pg_dsn: str, fresh: str) -> None:
    """0002_storage.sql adds only the parameters a table does not have yet: values an
    operator tuned before upgrading (docs/operations/retention.md) stay, and running
    the file again changes nothing."""
    store = await PostgresStore.connect(pg_dsn, prefix=fresh)
    try:
        await store.migrate()
        async with store.pool.acquire() as conn:
            # Back to version 1, as an operator had it, with two settings of their own.
            await conn.execute(f"DELETE FROM {fresh}migrations WHERE version = 2")
            for table, name, _ in STORAGE - {("jobs", "fillfactor", "80"), TALLY_FILL, SHARD_FILL}:
                if table in ("jobs", "journal", "workers"):  # 0002's; 0010's stay applied
                    await conn.execute(f"ALTER TABLE {fresh}{table} RESET ({name})")
            await conn.execute(f"ALTER TABLE {fresh}jobs SET (autovacuum_vacuum_threshold = 5000,"
                               " autovacuum_vacuum_cost_delay = 0)")
            assert await store.migrate() == ["0002_storage.sql"]
            upgraded = (await _catalog(conn, fresh))["options"]
            ((_, _, storage),) = [m for m in _sql.migrations() if m[1] == "0002_storage.sql"]
            await conn.execute(_sql.render_migration(storage, fresh))
            again = (await _catalog(conn, fresh))["options"]
    finally:
        await store.close()
    kept = {("jobs", "autovacuum_vacuum_threshold", "5000"),
            ("jobs", "autovacuum_vacuum_cost_delay", "0")}
    assert upgraded == {o for o in STORAGE if o[:2] not in {k[:2] for k in kept}} | kept
    assert again == upgraded


async def test_which_updates_can_be_hot(pg_store: PostgresStore) -> None:
    """What 0002_storage.sql's comment says about fill factors: every update of a job
    changes an indexed column or one a partial index's predicate reads, so none is HOT;
    the heartbeat's update of a worker touches no indexed column, so it is. The
    updates set the columns of postgres.sql's claim, extend_leases, settle_completions
    and heartbeat statements."""
    p = pg_store.prefix
    async with pg_store.pool.acquire() as conn:
        await conn.execute(f"INSERT INTO {p}jobs (id, kind, payload)"
                           " VALUES (gen_random_uuid(), 'k', '{}')")
        await conn.execute(f"UPDATE {p}jobs SET status = 'claimed', claimed_by = 'w/1',"
                           " run_count = run_count + 1, claim_expires_at = now() + interval '10s'")
        await conn.execute(f"UPDATE {p}jobs SET claim_expires_at = now() + interval '20s'")
        await conn.execute(f"UPDATE {p}jobs SET status = 'completed', finished_at = now(),"
                           " claimed_by = NULL, claim_expires_at = NULL")
        await conn.execute(f"INSERT INTO {p}workers (name, boot_id, host, pid, kinds, concurrency)"
                           " VALUES ('w', '1', 'h', 1, '{k}', 1)")
        for n in range(3):
            await conn.execute(f"UPDATE {p}workers SET in_flight = $1, draining = false,"
                               " last_seen = now()", n)
        # This session's counters reach the shared statistics when it next goes idle.
        await conn.execute("SELECT pg_stat_force_next_flush()")
        counts = {r["relname"][len(p):]: (r["n_tup_upd"], r["n_tup_hot_upd"]) for r in
                  await conn.fetch("SELECT relname, n_tup_upd, n_tup_hot_upd FROM"
                                   " pg_stat_user_tables WHERE relname = ANY($1::text[])",
                                   [f"{p}jobs", f"{p}workers"])}
    assert counts == {"jobs": (3, 0), "workers": (3, 3)}


_ROW = "INSERT INTO {p}jobs (id, kind, payload, %s) VALUES (gen_random_uuid(), 'k', '{{}}', $1)"


@pytest.mark.parametrize(("sql", "args"), [
    (_ROW % "status", ["running"]),
    (_ROW % "priority", [3]),
    (_ROW % "priority", [-1]),
    (_ROW % "max_failures", [0]),
    (_ROW % "status", ["claimed"]),  # a claim without owner and lease
    (_ROW % "status", ["completed"]),  # terminal without finished_at
    ("WITH j AS (INSERT INTO {p}jobs (id, kind, payload) VALUES (gen_random_uuid(), 'k', '{{}}')"
     " RETURNING id) INSERT INTO {p}journal (job_id, kind, run_no, outcome)"
     " SELECT id, 'k', 1, $1 FROM j", ["exploded"]),
])
async def test_check_constraints_reject_bad_rows(
    pg_store: PostgresStore, sql: str, args: list[Any]
) -> None:
    async with pg_store.pool.acquire() as conn:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(sql.format(p=pg_store.prefix), *args)
        assert await conn.fetchval(f"SELECT count(*) FROM {pg_store.prefix}jobs") == 0


async def test_a_second_periodic_occurrence_violates_the_unique_index(
    pg_store: PostgresStore,
) -> None:
    sql = (f"INSERT INTO {pg_store.prefix}jobs (id, kind, payload, periodic)"
           " VALUES (gen_random_uuid(), 'tick', '{}', true)")
    async with pg_store.pool.acquire() as conn:
        await conn.execute(sql)
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(sql)


BAD_PREFIXES = ["Bad-Prefix", "x;drop", "a" * 30, "", "1abc", "jobs ", "ÄÖ_", "a.b"]


@pytest.mark.parametrize("bad", BAD_PREFIXES)
async def test_bad_prefix_is_refused_before_any_sql(bad: str) -> None:
    unreachable = "postgresql://nobody:pw@127.0.0.1:1/none"  # any SQL would fail differently
    with pytest.raises(ConfigError, match="invalid prefix") as info:
        await PostgresStore.connect(unreachable, prefix=bad)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="invalid prefix"):
        async with Queue.connect(unreachable, prefix=bad):
            pass
    with pytest.raises(ConfigError):
        MemoryStore(prefix=bad)


async def test_good_prefixes_are_accepted() -> None:
    for good in ("venturi_", "_", "a" * 24, "q1_"):
        assert MemoryStore(prefix=good).prefix == good
