"""The finished jobs' tally on PostgreSQL (sql/0006_tallies.sql): exact under any
SQL, in the snapshot of whoever reads it, without writers waiting for each other,
and small however many backends have written to it."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.conftest import wait_for
from venturi import Queue, Status
from venturi.store import _sql
from venturi.store.base import Action, CleanupCriteria
from venturi.store.postgres import PostgresStore
from venturi.testing.builders import add, new_job, request, settlement

TERMINAL = ("completed", "dead")
_INSERT = ("INSERT INTO {p}jobs (id, kind, payload, status, finished_at)"
           " SELECT gen_random_uuid(), $1, '{{}}', $2, now() FROM generate_series(1, $3)")


@pytest.fixture
async def conn(pg_store: PostgresStore, pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(pg_dsn)
    try:
        yield c
    finally:
        await c.close()


async def _truth(conn: asyncpg.Connection, prefix: str) -> dict[tuple[str, str], int]:
    rows = await conn.fetch(f"SELECT kind, status, count(*) FROM {prefix}jobs"
                            " WHERE status IN ('completed', 'dead') GROUP BY 1, 2")
    return {(r[0], r[1]): r[2] for r in rows}


async def _tally(conn: asyncpg.Connection, prefix: str) -> dict[tuple[str, str], int]:
    rows = await conn.fetch(f"SELECT kind, status, sum(n)::bigint, sum(entered)::bigint"
                            f" FROM {prefix}tallies GROUP BY 1, 2")
    return {(r[0], r[1]): r[2] for r in rows if r[2]}


async def _entered(conn: asyncpg.Connection, prefix: str) -> dict[tuple[str, str], int]:
    rows = await conn.fetch(f"SELECT kind, status, sum(entered)::bigint FROM {prefix}tallies"
                            " GROUP BY 1, 2")
    return {(r[0], r[1]): r[2] for r in rows if r[2]}


async def test_an_operators_own_sql_is_counted_too(
    pg_store: PostgresStore, conn: asyncpg.Connection
) -> None:
    p = pg_store.prefix
    queue = Queue(pg_store)
    await conn.execute(_INSERT.format(p=p), "a", "completed", 30)
    await conn.execute(_INSERT.format(p=p), "b", "dead", 5)
    await add(pg_store, *[new_job("a") for _ in range(3)])
    assert await _tally(conn, p) == await _truth(conn, p) == {("a", "completed"): 30,
                                                              ("b", "dead"): 5}
    # Inserted finished: counted, but nothing entered a status by an update.
    assert await _entered(conn, p) == {}

    steps = [
        f"UPDATE {p}jobs SET status = 'completed' WHERE kind = 'b' AND id IN"
        f" (SELECT id FROM {p}jobs WHERE kind = 'b' LIMIT 2)",  # dead -> completed
        f"UPDATE {p}jobs SET kind = 'c' WHERE id IN"
        f" (SELECT id FROM {p}jobs WHERE kind = 'a' AND status = 'completed' LIMIT 4)",
        f"UPDATE {p}jobs SET payload = '{{\"x\": 1}}' WHERE status = 'completed'",  # no move
        f"MERGE INTO {p}jobs AS j USING (SELECT id FROM {p}jobs WHERE status = 'pending'"
        f" LIMIT 1) AS s ON j.id = s.id"
        f" WHEN MATCHED THEN UPDATE SET status = 'completed', finished_at = now()",
        f"UPDATE {p}jobs SET status = 'dead', finished_at = now() WHERE status = 'pending'",
        f"UPDATE {p}jobs SET status = 'pending', finished_at = NULL WHERE id IN"
        f" (SELECT id FROM {p}jobs WHERE status = 'dead' LIMIT 1)",  # a redrive by hand
        f"DELETE FROM {p}jobs WHERE id IN (SELECT id FROM {p}jobs WHERE kind = 'c' LIMIT 3)",
        f"WITH gone AS (DELETE FROM {p}jobs WHERE kind = 'b' RETURNING id) SELECT 1",
    ]
    for sql in steps:
        await conn.execute(sql)
        assert await _tally(conn, p) == await _truth(conn, p), sql
    assert await _entered(conn, p) == {("b", "completed"): 2, ("a", "completed"): 1,
                                       ("a", "dead"): 2}
    snap = await queue.stats()
    truth = await _truth(conn, p)
    assert snap.completed_by_kind == {k: n for (k, s), n in truth.items() if s == "completed"}
    assert snap.dead_by_kind == {k: n for (k, s), n in truth.items() if s == "dead"}

    # Uncommitted: counted in the deleting transaction's snapshot, not in others'.
    tx = conn.transaction()
    await tx.start()
    await conn.execute(f"DELETE FROM {p}jobs WHERE status = 'completed'")
    assert await _tally(conn, p) == await _truth(conn, p)
    assert (await queue.stats()).counts_by_status["completed"] == sum(
        n for (_, s), n in truth.items() if s == "completed") > 0
    await tx.rollback()
    await conn.execute(f"TRUNCATE {p}jobs")
    assert await _tally(conn, p) == {} and await _entered(conn, p) == {}


async def test_rolled_back_changes_count_nothing(
    pg_store: PostgresStore, conn: asyncpg.Connection
) -> None:
    p = pg_store.prefix
    await conn.execute(_INSERT.format(p=p), "a", "completed", 10)
    tx = conn.transaction()
    await tx.start()
    await conn.execute(f"DELETE FROM {p}jobs")
    await conn.execute(_INSERT.format(p=p), "z", "dead", 3)
    await tx.rollback()
    assert await _tally(conn, p) == await _truth(conn, p) == {("a", "completed"): 10}


async def test_concurrent_writers_do_not_wait_for_each_other(
    pg_store: PostgresStore, pg_dsn: str, conn: asyncpg.Connection
) -> None:
    """A transaction that finished jobs and is still open holds its own tally rows
    only: another backend finishing jobs of the same kind goes ahead."""
    p = pg_store.prefix
    other = await asyncpg.connect(pg_dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(_INSERT.format(p=p), "a", "completed", 5)
        # Would block until tx ends if both wrote one shared counter row.
        await asyncio.wait_for(other.execute(_INSERT.format(p=p), "a", "completed", 7), 10)
        await asyncio.wait_for(other.execute(f"DELETE FROM {p}jobs WHERE id IN"
                                             f" (SELECT id FROM {p}jobs LIMIT 2)"), 10)
        await tx.commit()
    finally:
        await other.close()
    assert await _tally(conn, p) == await _truth(conn, p) == {("a", "completed"): 10}


async def test_settling_workers_keep_the_tally_exact(
    pg_store: PostgresStore, pg_dsn: str, conn: asyncpg.Connection
) -> None:
    """Several stores settling and deleting at once, each on its own pool."""
    p = pg_store.prefix
    await add(pg_store, *[new_job(f"k{n % 3}", max_failures=2) for n in range(600)])
    stores = [await PostgresStore.connect(pg_dsn, prefix=p, max_size=3) for _ in range(4)]
    finished: Counter[tuple[str, Status]] = Counter()
    far = CleanupCriteria(dt.datetime.now(dt.UTC) + dt.timedelta(days=1), batch_size=5)

    async def work(store: PostgresStore, n: int) -> None:
        actions = [Action.COMPLETE, Action.KILL, Action.FAIL, Action.COMPLETE]
        while True:
            batch = await store.claim(request("k0", "k1", "k2", limit=10, by=f"w{n}/b"))
            if not batch:
                return
            results = await store.settle_many(f"w{n}/b", [settlement(j, actions[i % 4])
                                                          for i, j in enumerate(batch)])
            kinds = {j.id: j.kind for j in batch}
            finished.update((kinds[r.id], r.status) for r in results
                            if r.status is not None and r.status.terminal)
            if n == 0:
                await store.cleanup_exclusive(far)

    try:
        await asyncio.gather(*(work(s, n) for n, s in enumerate(stores)))
    finally:
        for s in stores:
            await s.close()
    truth = await _truth(conn, p)
    assert sum(truth.values()) > 0
    assert await _tally(conn, p) == truth
    snap = await Queue(pg_store).stats()
    assert snap.counts_by_status["pending"] == snap.counts_by_status["claimed"] == 0
    assert snap.completed_total_by_kind == {k: n for (k, s), n in finished.items()
                                            if s is Status.COMPLETED}
    assert snap.dead_total_by_kind == {k: n for (k, s), n in finished.items()
                                       if s is Status.DEAD}


async def _gone(conn: asyncpg.Connection, pid: int) -> None:
    async def vanished() -> bool:
        return not await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                                       pid)
    await wait_for(vanished, what=f"backend {pid} to exit")


async def _slots(conn: asyncpg.Connection, prefix: str) -> set[int]:
    return {r[0] for r in await conn.fetch(f"SELECT DISTINCT slot FROM {prefix}tallies")}


async def test_rows_of_backends_that_have_gone_are_folded(
    pg_store: PostgresStore, pg_dsn: str, conn: asyncpg.Connection
) -> None:
    p = pg_store.prefix
    for n in range(6):
        gone = await asyncpg.connect(pg_dsn)
        pid = await gone.fetchval("SELECT pg_backend_pid()")
        await gone.execute(_INSERT.format(p=p), "a", "completed", n + 1)
        await gone.execute(_INSERT.format(p=p), "b", "dead", 1)
        assert await _slots(conn, p) == {pid}  # it took over the rows of those before it
        await gone.close()
        await _gone(conn, pid)

    alive = await asyncpg.connect(pg_dsn)
    later = await asyncpg.connect(pg_dsn)
    try:
        await alive.execute(_INSERT.format(p=p), "a", "completed", 1)
        mine = await alive.fetchval("SELECT pg_backend_pid()")
        assert await _slots(conn, p) == {mine}
        # A live backend's rows stay its own when another one makes rows.
        await later.execute(_INSERT.format(p=p), "c", "completed", 1)
        assert await _slots(conn, p) == {mine, await later.fetchval("SELECT pg_backend_pid()")}
    finally:
        await alive.close()
        await later.close()
    assert await _tally(conn, p) == await _truth(conn, p) == {
        ("a", "completed"): 22, ("b", "dead"): 6, ("c", "completed"): 1}


async def test_the_migration_counts_the_jobs_already_there(
    pg_store: PostgresStore, conn: asyncpg.Connection
) -> None:
    """A queue upgraded with finished jobs in it starts from their true count."""
    p = pg_store.prefix
    await conn.execute(f"DROP TABLE {p}tallies")
    await conn.execute(f"DROP FUNCTION {p}tally_jobs() CASCADE")
    await conn.execute(f"DELETE FROM {p}migrations WHERE version = 6")
    await conn.execute(_INSERT.format(p=p), "a", "completed", 12)
    await conn.execute(_INSERT.format(p=p), "a", "dead", 2)
    assert await pg_store.migrate() == ["0006_tallies.sql"]
    assert await _tally(conn, p) == {("a", "completed"): 12, ("a", "dead"): 2}
    await conn.execute(_INSERT.format(p=p), "a", "completed", 1)
    assert await _tally(conn, p) == await _truth(conn, p)
    snap = await Queue(pg_store).stats()
    assert snap.counts_by_status == {"pending": 0, "claimed": 0, "completed": 13, "dead": 2}
    assert Status.COMPLETED.value in snap.counts_by_status


def test_the_tally_is_schema_qualified_like_every_table() -> None:
    stats = _sql.queries("q_", "other")["stats"].sql
    assert '"other".q_tallies' in stats and '"other".q_jobs' in stats
