"""Which settles announce a finished job, under real concurrency (PostgreSQL only):
the awaited flag of sql/0009_awaited.sql against a settle running at the same time,
and the wake-up for a claim that met the flag's row lock (docs/concepts/results.md)."""

from __future__ import annotations

import asyncio

import asyncpg

from tests.conftest import wait_for
from tests.helpers import add, claim_one, new_job, settlement
from venturi.notices import JobNotice, parse_finished, parse_job_notice
from venturi.store.base import Action, Status
from venturi.store.postgres import PostgresStore

_WAIT = 10.0


async def _blocked_on_a_lock(conn: asyncpg.Connection, blocker: int) -> bool:
    """Whether some backend waits for a lock ``blocker`` (a pid) holds."""
    return bool(await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", blocker))


async def test_a_settle_that_waited_for_the_flag_announces_the_job(
        pg_store: PostgresStore, pg_dsn: str) -> None:
    """The flag's write holds the row; a settle that started meanwhile waits for it and
    reads the flag in the row version it then updates (not in its older snapshot)."""
    (a,) = await add(pg_store, new_job())
    claimed = await claim_one(pg_store)
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with pg_store.listen_finished() as listener:
            tx = conn.transaction()
            await tx.start()
            await conn.execute(
                f"UPDATE {pg_store.prefix}jobs SET awaited = true WHERE id = $1", a.id)
            settling = asyncio.create_task(
                pg_store.settle("w/1", settlement(claimed, Action.COMPLETE)))
            pid = conn.get_server_pid()
            await wait_for(lambda: _blocked_on_a_lock(conn, pid), what="the settle to wait")
            await tx.commit()
            assert await settling
            async with asyncio.timeout(_WAIT):
                label, payload = await listener.receive()
            assert (label, parse_finished(payload)) == ("finished", [a.id])
    finally:
        await conn.close()


async def test_a_watch_that_waited_for_a_settle_reads_what_it_committed(
        pg_store: PostgresStore, pg_dsn: str) -> None:
    """The other order: a settle holds the row (it will not see the flag), and the
    watch that waits for it reads the row as the settle left it, finished, so the
    waiter does not wait for an announcement that will never come."""
    (a,) = await add(pg_store, new_job())
    await claim_one(pg_store)
    conn = await asyncpg.connect(pg_dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(f"UPDATE {pg_store.prefix}jobs SET status = 'completed', "
                           "finished_at = now(), claimed_by = NULL, claim_expires_at = NULL "
                           "WHERE id = $1", a.id)
        watching = asyncio.create_task(pg_store.watch_job(a.id))
        pid = conn.get_server_pid()
        await wait_for(lambda: _blocked_on_a_lock(conn, pid), what="the watch to wait")
        await tx.commit()
        async with asyncio.timeout(_WAIT):
            row = await watching
        assert row is not None and row.status is Status.COMPLETED
    finally:
        await conn.close()


async def test_watching_a_runnable_job_wakes_the_workers(pg_store: PostgresStore) -> None:
    """A claim that met the row while the watch held it skipped it (SKIP LOCKED): the
    watch's wake-up, sent at its commit, has the workers claim again. A job that is
    not runnable (claimed) gets none."""
    a, b = await add(pg_store, new_job("k"), new_job("k"))
    await claim_one(pg_store, "k")  # a
    async with pg_store.listen() as listener:
        watched = await pg_store.watch_job(a.id)
        assert watched is not None and watched.status is Status.CLAIMED
        watched = await pg_store.watch_job(b.id)
        assert watched is not None and watched.status is Status.PENDING
        async with asyncio.timeout(_WAIT):
            label, payload = await listener.receive()
        assert (label, parse_job_notice(payload)) == ("jobs", JobNotice("k"))
        # Nothing else came: the claimed job's watch sent nothing.
        try:
            async with asyncio.timeout(0.3):
                extra = await listener.receive()
        except TimeoutError:
            extra = None
        assert extra is None
