"""The claim keeps its index plan whatever the table held when it was first prepared
(docs/operations/maintenance.md, "Plans that outlive the table they were made for").

PostgreSQL plans a prepared statement's first five executions with their parameters,
then may keep a generic plan costed on the table as it was then. A claim prepared on a
new, empty queue and reused while the table grows (nothing vacuums or analyzes it, so
the plan is never replaced) joined its picked ids back to the jobs table by a
sequential scan over every row: the collapse of benchmarks/notes.md ("Steady state").
venturi's own pools plan every execution with its parameters, except two kinds of
statement. The claim runs on connections of its own that keep one generic plan, made
with sequential scans, hash and merge joins priced out, so that it joins its picked ids
back by the primary key whatever the table's size (venturi/store/postgres/driver.py,
CACHED_PLAN_SETTINGS). The psycopg pool keeps prepared only the statements that read no
table (``-- prepared:`` in the SQL). Each test here prepares the claim on an empty table,
grows the table by 40,000 rows and as many dead versions without a vacuum, and reads the
plan that same session then uses.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from tests.conftest import drop_prefix, wait_for
from tests.tasks import Embed, Refresh
from venturi import SyncQueue
from venturi.store.base import ClaimRequest
from venturi.store.flow import Limits, Rate
from venturi.store.postgres import PostgresStore
from venturi.store.postgres.asyncpg_driver import _usable
from venturi.store.postgres.asyncpg_setup import session_settings
from venturi.store.postgres.driver import CACHED_PLAN_SETTINGS

REQUEST = ClaimRequest(claimed_by="plan/1", leases={"embed": dt.timedelta(seconds=30)},
                       limit=10, reserve_normal=1, reserve_low=1)
# The claim's parameters as EXECUTE takes them: the clock ($1: none, database time),
# kinds, leases, limit, normal and low reservations, the claimant.
EXECUTE_ARGS = "(NULL, ARRAY['embed'], ARRAY['30 seconds'::interval], 10, 1, 1, 'plan/1')"


async def _store(dsn: str, prefix: str) -> PostgresStore:
    # One connection: every claim runs on the session whose plans the test reads.
    store = await PostgresStore.connect(dsn, prefix=prefix, min_size=1, max_size=1)
    await store.migrate()
    return store


@pytest.fixture
async def admin(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def _prepare_on_empty_then_grow(store: PostgresStore, admin: asyncpg.Connection,
                                      claim: Callable[[], Awaitable[int]] | None = None
                                      ) -> None:
    """``claim`` (the plain claim unless given) run on the empty table, which then grows;
    it returns how many jobs it took."""
    p = store.prefix
    # Before the first claim: an ALTER TABLE would itself replace cached plans.
    for table in ("jobs", "journal", "kinds", "kind_starts"):
        await admin.execute(f"ALTER TABLE {p}{table} SET (autovacuum_enabled = false)")

    async def plain() -> int:
        return len(await store.claim(REQUEST))

    for _ in range(8):  # past the fifth execution, where a generic plan may take over
        assert await (claim or plain)() == 0
    # 40,000 jobs run and finished (each leaving a dead version, as claims and settles
    # do), then a few runnable ones; no VACUUM, no ANALYZE: pg_class still says empty.
    await admin.execute(
        f"INSERT INTO {p}jobs (id, kind, payload, visible_at)"
        " SELECT gen_random_uuid(), 'embed', '{}', now() - interval '1 hour'"
        " FROM generate_series(1, 40000)")
    await admin.execute(
        f"UPDATE {p}jobs SET status = 'completed', finished_at = now(), run_count = 1")
    await admin.execute(
        f"INSERT INTO {p}jobs (id, kind, payload, visible_at)"
        " SELECT gen_random_uuid(), 'embed', '{}', now() - interval '1 minute'"
        " FROM generate_series(1, 50)")
    assert await admin.fetchval(
        "SELECT relpages FROM pg_class WHERE oid = $1::regclass", f"{p}jobs") == 0


async def _cached_claim(store: PostgresStore, statement: str = "claim"
                        ) -> tuple[dict[str, Any], list[str]]:
    """The claim's entry in the store's session (pg_prepared_statements), and the scans
    of the plan that session uses for it now (EXPLAIN EXECUTE: the cached plan source's
    own choice between its generic plan and a custom one). ``statement``: the plain
    claim or claim_limited_fast, which take the same parameters."""
    # The connection the claims ran on, which the driver holds between claims.
    (c,) = store.driver._cached_idle  # type: ignore[attr-defined]
    row = await c.fetchrow(
        "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE statement = $1", store._q[statement].sql)
    assert row is not None, f"{statement} is not prepared on the claim's connection"
    (plan,) = json.loads(await c.fetchval(
        f"EXPLAIN (FORMAT JSON) EXECUTE {row['name']}{EXECUTE_ARGS}"))
    scans: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            using = f" using {node['Index Name']}" if "Index Name" in node else ""
            scans.append(f"{node['Node Type']}{using} on {node['Relation Name']}")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return dict(row), scans


async def test_a_claim_prepared_on_an_empty_table_stays_on_its_indexes(
        pg_dsn: str, prefix: str, admin: asyncpg.Connection) -> None:
    store = await _store(pg_dsn, prefix)
    try:
        await _prepare_on_empty_then_grow(store, admin)
        claimed = await store.claim(REQUEST)
        entry, scans = await _cached_claim(store)
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)
    assert len(claimed) == 10
    # Planned once, on the empty table, and kept: no claim paid for planning since.
    assert entry["custom_plans"] == 0 and entry["generic_plans"] >= 9, entry
    assert f"Seq Scan on {prefix}jobs" not in scans, scans
    assert f"Index Scan using {prefix}jobs_pkey on {prefix}jobs" in scans or any(
        s.startswith("Index") and s.endswith(f"on {prefix}jobs") for s in scans), scans
    # No wall-clock bound on the claim: the first one after 40,000 updates with no vacuum
    # pays for their dead index entries, which a busy shared server can stretch past a
    # second, and the plan above is what shows the table is not scanned.


async def test_a_limited_claim_prepared_on_an_empty_table_stays_on_its_indexes(
        pg_dsn: str, prefix: str, admin: asyncpg.Connection) -> None:
    """The limited claim's fast path (limits configured, far from binding) keeps one
    plan on the claim's connection too, and it stays on the indexes of every table it
    reads: the jobs, the kinds' rows and the rate window's log."""
    store = await _store(pg_dsn, prefix)
    try:
        await store.declare_kinds({"embed": Limits(
            concurrency=10_000, rate=Rate(1_000_000, dt.timedelta(seconds=1)))})
        fast: list[int] = []
        fetch = store._fetch

        async def spy(name: str, *args: Any, **kw: Any) -> Any:
            found = await fetch(name, *args, **kw)
            if name == "claim_limited_fast":
                fast.append(len(found))
            return found
        store._fetch = spy  # type: ignore[method-assign]

        async def limited() -> int:
            return len((await store.claim_limited(REQUEST)).jobs)

        await _prepare_on_empty_then_grow(store, admin, limited)
        claimed = await limited()
        entry, scans = await _cached_claim(store, "claim_limited_fast")
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)
    assert claimed == 10 and fast[-1] == 10, fast  # by the fast path
    assert entry["custom_plans"] == 0 and entry["generic_plans"] >= 9, entry
    assert not [s for s in scans if s.startswith("Seq Scan")], scans
    # The tier scans on the claim index, the join back by the primary key, the count
    # of claimed jobs on jobs_claimed_kind (sql/0007_claimed_kinds.sql).
    for index in ("jobs_claim", "jobs_pkey"):
        assert f"Index Scan using {prefix}{index} on {prefix}jobs" in scans, scans
    assert f"Index Only Scan using {prefix}jobs_claimed_kind on {prefix}jobs" in scans, scans


async def test_without_its_planner_settings_the_cached_plan_scans_the_table(
        pg_dsn: str, prefix: str, admin: asyncpg.Connection) -> None:
    """The mechanism, pinned: the claim's session with sequential scans and hash joins
    allowed again (the DSN may ask for it) keeps the generic plan it made on the empty
    table, a sequential scan of the now large one."""
    allowed = "enable_seqscan=on&enable_hashjoin=on&enable_mergejoin=on"
    store = await _store(f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}{allowed}", prefix)
    try:
        await _prepare_on_empty_then_grow(store, admin)
        entry, scans = await _cached_claim(store)
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)
    assert entry["generic_plans"] >= 1, entry
    assert f"Seq Scan on {prefix}jobs" in scans, scans


async def test_only_venturis_own_connections_are_set(pg_dsn: str, pg_store: PostgresStore,
                                                     admin: asyncpg.Connection) -> None:
    async with pg_store.pool.acquire() as c:
        assert await c.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
    # A caller's connection (conn=) is used as it is.
    await pg_store.enqueue([], conn=admin)
    assert await admin.fetchval("SHOW plan_cache_mode") == "auto"
    # A pool of the caller's is too.
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    try:
        theirs = PostgresStore.from_pool(pool, prefix=pg_store.prefix)
        await theirs.stats()
        async with pool.acquire() as c:
            assert await c.fetchval("SHOW plan_cache_mode") == "auto"
    finally:
        await pool.close()


def _scans(plan: dict[str, Any]) -> list[str]:
    """The scan nodes of an EXPLAIN (FORMAT JSON) plan, as "Node Type on relation"."""
    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if node["Node Type"].endswith("Scan"):
            found.append(f"{node['Node Type']} on {node.get('Relation Name', '?')}")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return found


async def test_synchronous_queue_keeps_prepared_only_what_reads_no_table(
        pg_dsn: str, prefix: str, admin: asyncpg.Connection) -> None:
    """psycopg prepares a statement run five times, and PostgreSQL may then keep a
    generic plan of it. SyncQueue's pool keeps prepared only the statements that read
    no table (the single-row insert: its plan has nothing to go stale); the ones that
    scan go unnamed, planned with their parameters each time, whatever the table grew
    to since."""
    try:
        with SyncQueue.connect(pg_dsn, prefix=prefix, max_size=1) as queue:
            queue.migrate()
            for table in ("jobs", "journal"):
                await admin.execute(
                    f"ALTER TABLE {prefix}{table} SET (autovacuum_enabled = false)")
            for n in range(8):  # past the fifth execution, on a table that is still empty
                job = queue.enqueue(Embed(uri=f"file:///{n}")).id
                queue.enqueue(Refresh(uri=f"file:///r{n % 2}"))  # dedup: lock, candidate, insert
                queue.job(job)
                queue.count(kind="test.embed", statuses=["pending"])
                queue.cancel(ids=[job])
            await admin.execute(
                f"INSERT INTO {prefix}jobs (id, kind, payload) SELECT gen_random_uuid(),"
                " 'test.embed', '{}' FROM generate_series(1, 40000)")
            queue.count(kind="test.embed", statuses=["pending"])
            pool: Any = queue.store.driver.pool  # type: ignore[attr-defined]
            statements = {q.sql: q for q in queue.store._q.values()}  # type: ignore[attr-defined]
            with pool.connection() as c:
                prepared = c.execute("SELECT name, statement, generic_plans + custom_plans"
                                     " FROM pg_prepared_statements").fetchall()
                kept = {statements[sql].name: (name, runs) for name, sql, runs in prepared}
                assert set(kept) == {"insert_one"}, sorted(kept)
                name, runs = kept["insert_one"]
                assert runs >= 8
                c.execute("SET plan_cache_mode = force_generic_plan")
                sql = queue.store._q["insert_one"].sql  # type: ignore[attr-defined]
                nulls = ", ".join(["NULL"] * max(int(n) for n in re.findall(r"\$(\d+)", sql)))
                ((plan,),) = c.execute(
                    f"EXPLAIN (FORMAT JSON) EXECUTE {name}({nulls})").fetchall()
                c.execute("RESET plan_cache_mode")
            assert _scans(plan[0]) == []
    finally:
        await drop_prefix(pg_dsn, prefix)


async def test_the_claims_own_connections_are_set(pg_store: PostgresStore) -> None:
    pool = pg_store.driver.cached  # type: ignore[attr-defined]
    async with pool.acquire() as c:
        got = {k: await c.fetchval(f"SHOW {k}") for k in CACHED_PLAN_SETTINGS}
    assert got == CACHED_PLAN_SETTINGS


async def test_statements_marked_prepared_read_no_table(pg_store: PostgresStore,
                                                        admin: asyncpg.Connection) -> None:
    """What the drivers keep generic plans of (``-- prepared:`` in the SQL files) is
    only what no table size can make a bad plan for: a generic plan that scans no table
    (it may scan its own parameters, ``unnest``, and a CTE of the rows it inserts)."""
    marked = [q for q in pg_store._q.values() if q.prepared]
    assert marked, "no statement is marked prepared"
    async with admin.transaction():
        await admin.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for q in marked:
            statement = await admin.prepare(q.sql)
            nulls = ", ".join(["NULL"] * len(statement.get_parameters()))
            await admin.execute(f"PREPARE marked AS {q.sql}")
            (plan,) = json.loads(await admin.fetchval(
                f"EXPLAIN (FORMAT JSON) EXECUTE marked({nulls})"))
            await admin.execute("DEALLOCATE marked")
            tables = [scan for scan in _scans(plan) if not scan.endswith(" on ?")]
            assert tables == [], (q.name, _scans(plan))


def test_what_the_dsn_says_wins() -> None:
    assert session_settings("postgresql://h/db", pooler=False) == {
        "plan_cache_mode": "force_custom_plan"}
    assert session_settings("postgresql://h/db?plan_cache_mode=auto", pooler=False) is None
    assert session_settings("postgresql://h/db?enable_seqscan=on", False,
                            CACHED_PLAN_SETTINGS) == {
        "plan_cache_mode": "force_generic_plan", "enable_hashjoin": "off",
        "enable_mergejoin": "off"}
    # Behind PgBouncer: no startup parameter it would refuse; no named statements either.
    assert session_settings("postgresql://h/db", pooler=True) is None


async def test_a_claim_connection_lost_between_claims_is_replaced(
        pg_store: PostgresStore, admin: asyncpg.Connection) -> None:
    """The claim's connection is held between claims, not released to its pool: one
    that died meanwhile is replaced, and the claim goes through."""
    await pg_store.claim(REQUEST)
    (kept,) = pg_store.driver._cached_idle  # type: ignore[attr-defined]
    pid = kept.get_server_pid()
    assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    await wait_for(lambda: not _usable(kept), what="the kept claim connection to close")
    assert await pg_store.claim(REQUEST) == []
    (again,) = pg_store.driver._cached_idle  # type: ignore[attr-defined]
    assert again.get_server_pid() != pid


async def test_more_concurrent_claims_than_claim_connections_all_go_through(
        pg_store: PostgresStore) -> None:
    """The held connection goes back to its pool while other claims wait for one."""
    for _ in range(3):
        claims = asyncio.gather(*(pg_store.claim(REQUEST) for _ in range(5)))
        assert await asyncio.wait_for(claims, 10) == [[]] * 5
