"""The worker's own vacuum (venturi/worker/vacuum.py, docs/operations/maintenance.md):
on by default, it vacuums the queue's tables once dead row versions pile up where
autovacuum does not visit, on a session of its own; a failed VACUUM is logged and does
not stop the worker; ``maintenance=False`` (``--maintenance off``) turns it off.

Autovacuum is off for the test's tables whatever the server says, so that only the
worker vacuums them; the assertions read the server's own count of vacuums."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator

import asyncpg
import pytest
from structlog.testing import capture_logs

import venturi
from venturi import ConfigError, Queue, WorkerConfig
from venturi.maintenance import TABLES, VacuumPolicy, VacuumRun
from venturi.store.memory import MemoryStore
from venturi.store.postgres import PostgresStore
from venturi.worker.health import DatabaseHealth, Health
from venturi.worker.metrics import WorkerMetrics
from venturi.worker.vacuum import Vacuum

from ..conftest import wait_for
from .conftest import running

pytestmark = pytest.mark.timeout(60)

EAGER = VacuumPolicy(interval=dt.timedelta(seconds=0.1), dead_tuples=50, dead_fraction=0.0,
                     analyze=0, min_gap=dt.timedelta(0))


class Nap(venturi.Task, kind="wvac.nap"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


@pytest.fixture
async def admin(pg_dsn: str, pg_store_dbclock: PostgresStore) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        for table in ("jobs", "journal"):
            await conn.execute(f"ALTER TABLE {pg_store_dbclock.prefix}{table}"
                               " SET (autovacuum_enabled = false)")
        yield conn
    finally:
        await conn.close()


async def _churn(conn: asyncpg.Connection, prefix: str, rows: int = 500) -> None:
    """``rows`` dead versions in the jobs table, counted in the shared statistics."""
    await conn.execute(
        f"INSERT INTO {prefix}jobs (id, kind, payload, status, finished_at)"
        " SELECT gen_random_uuid(), 'wvac.nap', '{}', 'completed', now()"
        " FROM generate_series(1, $1)", rows)
    await conn.execute(f"UPDATE {prefix}jobs SET run_count = run_count + 1")
    await conn.execute("SELECT pg_stat_force_next_flush()")


async def _vacuums(conn: asyncpg.Connection, prefix: str) -> int:
    return int(await conn.fetchval(
        "SELECT vacuum_count FROM pg_stat_all_tables WHERE relid = $1::regclass",
        f"{prefix}jobs"))


def _db() -> DatabaseHealth:
    return DatabaseHealth(Health(), WorkerMetrics().db_unavailable, 0.1)


def test_on_by_default_and_off_on_request() -> None:
    assert WorkerConfig().vacuum_policy == VacuumPolicy()
    assert WorkerConfig(maintenance=False).vacuum_policy is None
    assert WorkerConfig(maintenance=None).vacuum_policy is None
    assert WorkerConfig(maintenance=True).vacuum_policy == VacuumPolicy()
    assert WorkerConfig(maintenance=EAGER).vacuum_policy is EAGER
    with pytest.raises(ConfigError, match="maintenance"):
        WorkerConfig(maintenance="on")  # type: ignore[arg-type]


async def test_a_worker_vacuums_a_table_autovacuum_does_not_visit(
        pg_store_dbclock: PostgresStore, admin: asyncpg.Connection) -> None:
    prefix = pg_store_dbclock.prefix
    await _churn(admin, prefix)
    before = await _vacuums(admin, prefix)
    worker = venturi.Worker(Queue(pg_store_dbclock), tasks=[Nap], maintenance=EAGER)
    with capture_logs() as logs:
        async with running(worker):
            # A look reports once it has been through both tables.
            await wait_for(lambda: any(e["event"] == "table_vacuumed" for e in logs),
                           timeout=30, what="the worker's VACUUM of the jobs table")
            assert await _vacuums(admin, prefix) > before
            # It ran on a session of its own: the worker's pool stayed free for jobs.
            job = await worker.queue.enqueue(Nap())

            async def done() -> bool:
                found = await worker.queue.job(job.id)
                return found is not None and found.status is venturi.Status.COMPLETED

            await wait_for(done, what="a job run while the service looks")
    events = [e for e in logs if e["event"] == "table_vacuumed"]
    assert events and events[0]["table"].endswith(f"{prefix}jobs"), logs
    assert events[0]["reason"] == "autovacuum-off" and events[0]["dead_before"] >= 500


async def test_the_service_vacuums_then_waits_for_more_dead_rows(
        pg_store_dbclock: PostgresStore, admin: asyncpg.Connection) -> None:
    prefix = pg_store_dbclock.prefix
    await _churn(admin, prefix)
    service = Vacuum(pg_store_dbclock, EAGER, _db())
    task = asyncio.create_task(service.run())
    try:
        # (The churn's tally updates leave dead rows of their own: that table's VACUUM
        # is another run.)
        def jobs() -> list[VacuumRun]:
            return [r for r in service.runs if r.table.endswith(f"{prefix}jobs")]
        await wait_for(lambda: bool(jobs()), what="the first VACUUM")
        (first,) = jobs()
        assert first.skipped is None and first.dead_before >= 500
        assert first.dead_after is not None and first.dead_after < first.dead_before
        count = await _vacuums(admin, prefix)
        # Below the threshold again: the looks that follow do nothing ...
        looks = asyncio.get_running_loop().time()
        await wait_for(lambda: asyncio.get_running_loop().time() - looks > 0.5,
                       what="a few more looks")
        assert await _vacuums(admin, prefix) == count and len(jobs()) == 1
        # ... until dead rows pile up again.
        await _churn(admin, prefix)
        await wait_for(lambda: len(jobs()) == 2, what="the second VACUUM")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_first_look_waits_an_interval_after_the_start(
        pg_store_dbclock: PostgresStore, admin: asyncpg.Connection) -> None:
    """A booting worker makes its claims first: no session, no statistics read and no
    VACUUM until one interval has passed (eight workers starting together each opened a
    session and read the statistics at once)."""
    prefix = pg_store_dbclock.prefix
    await _churn(admin, prefix)
    policy = VacuumPolicy(interval=dt.timedelta(seconds=0.5), dead_tuples=50,
                          dead_fraction=0.0, analyze=0, min_gap=dt.timedelta(0))
    service = Vacuum(pg_store_dbclock, policy, _db())
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.create_task(service.run())
    try:
        await wait_for(lambda: bool(service.runs), what="the first VACUUM")
        assert loop.time() - started >= 0.5
        assert service.runs[0].skipped is None and service.runs[0].dead_before >= 500
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_failed_vacuum_is_logged_and_the_service_goes_on(
        pg_dsn: str, pg_store_dbclock: PostgresStore, admin: asyncpg.Connection) -> None:
    """A VACUUM cut short (here by a statement timeout on the maintenance session, as
    an operator's pg_cancel_backend would) is a warning, not a reason to stop."""
    prefix = pg_store_dbclock.prefix
    await _churn(admin, prefix, rows=20_000)
    pg_store_dbclock.listen_dsn = (
        f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}statement_timeout=1")
    service = Vacuum(pg_store_dbclock, EAGER, _db())
    with capture_logs() as logs:
        task = asyncio.create_task(service.run())
        try:
            await wait_for(lambda: sum(e["event"] == "vacuum_failed" for e in logs) >= 2,
                           what="two failed looks")
            assert not task.done()
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    failed = next(e for e in logs if e["event"] == "vacuum_failed")
    # A classification, never the server's message (docs/operations/logging.md).
    assert (failed["error"], failed["sqlstate"]) == ("venturi.errors.DatabaseConflict",
                                                     "57014"), failed
    # The looks that failed left their try-lock behind in no session (the service ends
    # its session after a failure): another worker may vacuum.
    async def free() -> bool:
        return bool(await admin.fetchval(
            "SELECT pg_try_advisory_lock(hashtextextended('venturi:maintenance:' || $1, 0))",
            prefix))

    await wait_for(free, what="the maintenance try-lock")
    await admin.fetchval(
        "SELECT pg_advisory_unlock(hashtextextended('venturi:maintenance:' || $1, 0))", prefix)


async def test_a_store_with_nothing_to_vacuum_needs_no_service() -> None:
    service = Vacuum(MemoryStore(), EAGER, _db())
    await asyncio.wait_for(service.run(), timeout=5)  # returns at once
    assert service.runs == []


async def test_every_table_that_turns_over_with_the_jobs_is_vacuumed(
        pg_store_dbclock: PostgresStore, admin: asyncpg.Connection) -> None:
    """Where autovacuum does not run, the worker's vacuum covers the tables whose rows
    come and go with the jobs (venturi/maintenance.py, TABLES): once it only knew jobs
    and journal, and the rate log, the edges and the tallies grew without bound."""
    prefix = pg_store_dbclock.prefix
    churned = {
        "dependencies": "INSERT INTO {p}dependencies (after_id, job_id) SELECT"
                        " gen_random_uuid(), gen_random_uuid() FROM generate_series(1, 500)",
        "dependency_shards": "INSERT INTO {p}dependency_shards (job_id, shard, waiting)"
                             " SELECT gen_random_uuid(), 0, 1 FROM generate_series(1, 500)",
        "workflows": "INSERT INTO {p}workflows (id, name, steps) SELECT gen_random_uuid(),"
                     " 'w', '[]' FROM generate_series(1, 500)",
        "kind_starts": "INSERT INTO {p}kind_starts (kind, claimed_at, n) SELECT 'k', now(), 1"
                       " FROM generate_series(1, 500)",
    }
    for table, insert in churned.items():
        await admin.execute(f"ALTER TABLE {prefix}{table} SET (autovacuum_enabled = false)")
        await admin.execute(insert.format(p=prefix))
        await admin.execute(f"DELETE FROM {prefix}{table}")
    await admin.execute(f"ALTER TABLE {prefix}tallies SET (autovacuum_enabled = false)")
    await _churn(admin, prefix)  # the jobs table's triggers update the tallies
    service = Vacuum(pg_store_dbclock, EAGER, _db())
    task = asyncio.create_task(service.run())
    expected = {f"{prefix}{t}" for t in [*churned, "tallies", "jobs"]}

    def vacuumed() -> set[str]:
        return {r.table.rpartition(".")[2] for r in service.runs if r.skipped is None}
    try:
        await wait_for(lambda: expected <= vacuumed(), what=f"VACUUMs of {sorted(expected)}")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert set(TABLES) == {"jobs", "journal", *churned, "tallies"}
