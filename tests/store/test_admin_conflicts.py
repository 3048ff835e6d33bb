"""An operator's cancel and redrive that lose a race are sent again (docs/concepts/failures.md,
"Losing the database is not a failure"): a deadlock with a worker's settle is weather, not
a reason to tell the operator their cancel failed. In a caller's transaction (``conn=``)
they are not: only the caller can run a rolled-back transaction again.

Made deterministic with real row locks: another session holds the second of two jobs the
cancel visits (their ids and their places in the table are in the same order, so every plan
visits them in it), the cancel deletes the first and waits for the second, and the other
session then asks for the first. With its ``deadlock_timeout`` far longer than the cancel's
session's (2 s, set for these tests), PostgreSQL's deadlock check runs in the cancel's
session first and rolls the cancel back (40P01), as it would a cancel that met a settle of
the same rows in the other order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from structlog.testing import capture_logs

from tests.conftest import _migrated_store, wait_for
from tests.tasks import Embed
from venturi import ManualClock, Queue
from venturi.errors import DatabaseConflict
from venturi.store.postgres import PostgresStore

BLOCKED_BY = ("SELECT count(*) FROM pg_stat_activity"
              " WHERE wait_event_type = 'Lock' AND $1 = ANY(pg_blocking_pids(pid))")


@pytest.fixture
async def pg_store(pg_dsn: str, prefix: str, clock: ManualClock) -> AsyncIterator[PostgresStore]:
    """The store's sessions run PostgreSQL's deadlock check after 2 s of waiting, not 1:
    the other session asks for its second row within that time of the action's wait
    beginning, however slow the machine, so the check finds the cycle when it runs."""
    dsn = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}deadlock_timeout=2s"
    async for made in _migrated_store(dsn, prefix, clock):
        yield made


@pytest.fixture
def pg_queue(pg_store: PostgresStore) -> Queue:
    return Queue(pg_store)


async def _two_jobs(queue: Queue) -> list[UUID]:
    ids = [(await queue.enqueue(Embed(uri=f"doc://{n}"))).id for n in range(2)]
    assert ids == sorted(ids)  # time-ordered ids: index and heap order agree
    return ids


@asynccontextmanager
async def _holding(dsn: str, prefix: str, job: UUID) -> AsyncIterator[asyncpg.Connection]:
    """Another session, in a transaction that holds ``job``'s row; it never runs the
    deadlock check first."""
    other = await asyncpg.connect(dsn)
    try:
        await other.execute("SET deadlock_timeout = '60s'")
        async with other.transaction():
            await other.execute(f"SELECT 1 FROM {prefix}jobs WHERE id = $1 FOR UPDATE", job)
            yield other
    finally:
        await other.close()


async def _deadlock(store: PostgresStore, other: asyncpg.Connection, first: UUID,
                    action: Callable[[], Awaitable[Any]]) -> asyncio.Task[Any]:
    """Start ``action``; once it waits for ``other``, make ``other`` wait for ``first``
    (which ``action`` holds by then) until PostgreSQL rolls one of them back."""
    task = asyncio.ensure_future(action())

    async def waiting() -> bool:
        assert not task.done(), "the action did not wait for the other session's row"
        return bool(await store.pool.fetchval(BLOCKED_BY, other.get_server_pid()))
    await wait_for(waiting, what="the action to wait for the held row")
    await asyncio.wait_for(
        other.execute(f"SELECT 1 FROM {store.prefix}jobs WHERE id = $1 FOR UPDATE", first), 20)
    return task


async def test_a_cancel_that_loses_a_deadlock_is_sent_again(
        pg_queue: Queue, pg_store: PostgresStore, pg_dsn: str) -> None:
    first, second = await _two_jobs(pg_queue)
    with capture_logs() as logs:
        async with _holding(pg_dsn, pg_store.prefix, second) as other:
            cancel = await _deadlock(pg_store, other,
                                     first, lambda: pg_queue.cancel(ids=[first, second]))
        # The other session has both rows and commits; the cancel is sent again.
        assert await asyncio.wait_for(cancel, 20) == 2
    assert await pg_queue.job(first) is None and await pg_queue.job(second) is None
    retried = [e for e in logs if e["event"] == "admin_conflict_retried"]
    assert [(e["statement"], e["attempt"]) for e in retried] == [("cancel_ids", 1)]
    assert retried[0]["error"] == "venturi.errors.DatabaseConflict"


async def test_a_redrive_that_loses_a_deadlock_is_sent_again(
        pg_queue: Queue, pg_store: PostgresStore, pg_dsn: str) -> None:
    first, second = await _two_jobs(pg_queue)
    await pg_store.pool.execute(
        f"UPDATE {pg_store.prefix}jobs SET status = 'dead', finished_at = now()"
        " WHERE id = ANY($1::uuid[])", [first, second])
    with capture_logs() as logs:
        async with _holding(pg_dsn, pg_store.prefix, second) as other:
            redrive = await _deadlock(pg_store, other,
                                      first, lambda: pg_queue.retry(ids=[first, second]))
        assert await asyncio.wait_for(redrive, 20) == 2
    assert [e["statement"] for e in logs if e["event"] == "admin_conflict_retried"] == [
        "retry_ids"]
    assert {(await pg_queue.job(i)).status.value for i in (first, second)  # type: ignore[union-attr]
            } == {"pending"}


async def test_in_the_callers_transaction_a_lost_race_is_the_callers_to_run_again(
        pg_queue: Queue, pg_store: PostgresStore, pg_dsn: str) -> None:
    first, second = await _two_jobs(pg_queue)
    caller = await asyncpg.connect(pg_dsn, server_settings={"deadlock_timeout": "2s"})
    try:
        tx = caller.transaction()
        await tx.start()
        with capture_logs() as logs:
            async with _holding(pg_dsn, pg_store.prefix, second) as other:
                cancel = await _deadlock(
                    pg_store, other, first,
                    lambda: pg_queue.cancel(ids=[first, second], conn=caller))
                with pytest.raises(DatabaseConflict):
                    await asyncio.wait_for(cancel, 20)
        await tx.rollback()
    finally:
        await caller.close()
    assert not [e for e in logs if e["event"] == "admin_conflict_retried"]
    assert await pg_queue.job(first) is not None and await pg_queue.job(second) is not None
