"""Enqueue behaviour only PostgreSQL has: concurrent dedup across connections and
enqueue inside the caller's transaction (NOTIFY delivered at commit)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.conftest import wait_for
from tests.tasks import Embed, Refresh, Summarize, Urgent
from venturi import Enqueued, ManualClock, Outcome, Queue
from venturi.store.postgres import PostgresStore
from venturi.store.postgres.producing import dedup_lock_key

# Advisory locks someone waits for that the given backend holds.
QUEUED_BEHIND = (
    "SELECT count(*) FROM pg_locks AS w JOIN pg_locks AS h ON h.locktype = 'advisory'"
    " AND h.granted AND h.pid = $1 AND (h.database, h.classid, h.objid, h.objsubid)"
    " = (w.database, w.classid, w.objid, w.objsubid)"
    " WHERE w.locktype = 'advisory' AND NOT w.granted")


@pytest.fixture
def pg_queue(pg_store: PostgresStore) -> Queue:
    return Queue(pg_store)


@pytest.fixture
async def listener(pg_dsn: str, prefix: str) -> AsyncIterator[asyncio.Queue[str]]:
    """A dedicated LISTEN connection on ``{prefix}jobs``."""
    received: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(pg_dsn)
    await conn.add_listener(f"{prefix}jobs", lambda *args: received.put_nowait(args[3]))
    try:
        yield received
    finally:
        await conn.close()


async def _sync(pg_dsn: str, prefix: str, received: asyncio.Queue[str]) -> list[str]:
    """Everything notified before now: send a marker and collect up to it."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f"SELECT pg_notify('{prefix}jobs', 'marker')")
    finally:
        await conn.close()
    seen = []
    while (item := await asyncio.wait_for(received.get(), timeout=10)) != "marker":
        seen.append(item)
    return seen


async def test_concurrent_enqueues_of_one_key_leave_one_pending_row(
    pg_queue: Queue, pg_store: PostgresStore
) -> None:
    n = 10  # the pool has 10 connections: every enqueue runs on its own
    results = await asyncio.gather(*(
        pg_queue.enqueue(Refresh(uri="same", version=i)) for i in range(n)))
    assert len({r.id for r in results}) == 1
    assert sorted(r.merged for r in results) == [False] + [True] * (n - 1)
    assert await pg_queue.count(kind="test.refresh") == 1
    assert len(await pg_queue.journal(results[0].id)) == n - 1

    # The same through enqueue_many batches racing each other.
    batches = await asyncio.gather(*(
        pg_queue.enqueue_many([Refresh(uri="batch", version=i), Refresh(uri="batch")])
        for i in range(n)))
    assert len({id for ids in batches for id in ids}) == 1
    assert await pg_queue.count(kind="test.refresh", statuses=["pending"]) == 2


async def test_enqueue_in_callers_transaction_rolls_back_with_it(
    pg_queue: Queue, pg_dsn: str, prefix: str, listener: asyncio.Queue[str]
) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        single = await pg_queue.enqueue(Embed(uri="file:///t"), conn=conn)
        many = await pg_queue.enqueue_many([Embed(uri="m"), Refresh(uri="r")], conn=conn)
        assert await conn.fetchval(f"SELECT count(*) FROM {prefix}jobs") == 3
        await tx.rollback()
    finally:
        await conn.close()
    for id in (single.id, *many):
        assert await pg_queue.job(id) is None
    assert await pg_queue.count() == 0
    assert await _sync(pg_dsn, prefix, listener) == []


async def test_notify_arrives_only_after_the_callers_commit(
    pg_queue: Queue, pg_dsn: str, prefix: str, listener: asyncio.Queue[str]
) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1")  # the caller's own work
            job = await pg_queue.enqueue(Embed(uri="file:///t"), conn=conn)
            await pg_queue.enqueue(Refresh(uri="r"), conn=conn)  # the dedup path too
            assert await pg_queue.job(job.id) is None  # invisible outside the transaction
            assert await _sync(pg_dsn, prefix, listener) == []
        assert await _sync(pg_dsn, prefix, listener) == ["test.embed", "test.refresh"]
    finally:
        await conn.close()
    assert await pg_queue.job(job.id) is not None


async def test_the_usual_job_and_one_with_every_column_insert_alike(
    pg_store: PostgresStore, pg_store_dbclock: PostgresStore, clock: ManualClock,
    pg_dsn: str, prefix: str, listener: asyncio.Queue[str]
) -> None:
    """A job visible at once with nothing but its task's columns takes the short insert
    (``insert_now``), any other ``insert_one``: the same row and the same wake-up,
    sent at the caller's commit, on the store's clock or the database's."""
    columns = ("kind, payload::text, priority, max_failures, status, carry, dedup_key, subject,"
               " periodic, trace_context, limit_key, run_count, failure_count,"
               " visible_at = created_at")
    for store in (pg_store, pg_store_dbclock):
        queue = Queue(store)
        conn = await asyncpg.connect(pg_dsn)
        try:
            async with conn.transaction():
                usual = await queue.enqueue(Urgent(n=1), conn=conn)
                assert await _sync(pg_dsn, prefix, listener) == []
            alone = await queue.enqueue(Urgent(n=1))
            # The same task with a carry goes through insert_one.
            (general,) = await store.enqueue([dataclasses.replace(
                queue._jobs.new_job(Urgent(n=1))[0], carry="null")])
            later = await queue.enqueue(Urgent(n=2), delay=dt.timedelta(hours=1))
            rows = [await conn.fetchrow(f"SELECT {columns}, created_at FROM {prefix}jobs"
                                        " WHERE id = $1", id)
                    for id in (usual.id, alone.id, general.id, later.id)]
        finally:
            await conn.close()
        usual_row = ("test.urgent", '{"n": 1}', 0, 25, "pending", None, None, None, False,
                     None, None, 0, 0, True)
        assert tuple(rows[0])[:-1] == tuple(rows[1])[:-1] == usual_row
        assert tuple(rows[2])[:-1] == (*usual_row[:5], "null", *usual_row[6:])
        assert tuple(rows[3])[-2] is False
        if store is pg_store:
            assert rows[0]["created_at"] == clock.now()
        wakeups = await _sync(pg_dsn, prefix, listener)
        assert wakeups[:3] == ["test.urgent"] * 3, wakeups
        assert wakeups[3].startswith("test.urgent|") and len(wakeups) == 4, wakeups


async def test_a_plain_batch_wakes_each_of_its_kinds_once_at_commit(
    pg_store: PostgresStore, clock: ManualClock, pg_dsn: str, prefix: str,
    listener: asyncio.Queue[str]
) -> None:
    """``enqueue_batch`` (insert_batch) sends the kinds it was given, one wake-up each,
    when the caller commits; its rows are visible at once, on the store's clock."""
    queue = Queue(pg_store)
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with conn.transaction():
            ids = await queue.enqueue_many(
                [Urgent(n=1), Summarize(uri="s1"), Urgent(n=2), Summarize(uri="s2")], conn=conn)
            assert await _sync(pg_dsn, prefix, listener) == []
        rows = [await conn.fetchrow(
            f"SELECT kind, subject, periodic, trace_context, created_at, visible_at"
            f" FROM {prefix}jobs WHERE id = $1", id) for id in ids]
    finally:
        await conn.close()
    assert sorted(await _sync(pg_dsn, prefix, listener)) == ["test.summarize", "test.urgent"]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("test.urgent", None, False, None), ("test.summarize", "s1", False, None),
        ("test.urgent", None, False, None), ("test.summarize", "s2", False, None)]
    assert {(r[4], r[5]) for r in rows} == {(clock.now(), clock.now())}


async def test_enqueue_uses_nothing_configured_on_the_callers_connection(
    pg_queue: Queue, pg_dsn: str
) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        # A caller with its own JSON codec and another search_path still works:
        # payloads are bound as text, tables are schema-qualified.
        await conn.set_type_codec("jsonb", encoder=lambda v: v, decoder=lambda v: "decoded",
                                  schema="pg_catalog")
        await conn.execute("SET search_path TO pg_catalog")
        job = await pg_queue.enqueue(Embed(uri="file:///c"), conn=conn)
        await pg_queue.enqueue_many([Embed(uri="x"), Refresh(uri="y")], conn=conn)
    finally:
        await conn.close()
    row = await pg_queue.job(job.id)
    assert row is not None and row.payload == {"uri": "file:///c", "model": "small"}


async def test_enqueue_joins_a_manually_started_transaction(
    pg_queue: Queue, pg_dsn: str
) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        for finish in ("ROLLBACK", "COMMIT"):
            await conn.execute("BEGIN")
            first = await pg_queue.enqueue(Refresh(uri="manual"), conn=conn)
            again = await pg_queue.enqueue(Refresh(uri="manual"), conn=conn)
            ids = await pg_queue.enqueue_many([Embed(uri="m"), Refresh(uri="manual")], conn=conn)
            assert again.id == first.id == ids[1] and again.merged
            await conn.execute(finish)
            assert not conn.is_in_transaction()
    finally:
        await conn.close()
    assert await pg_queue.count() == 2
    assert await pg_queue.job(first.id) is not None


async def test_cancel_in_callers_transaction_follows_it(pg_queue: Queue, pg_dsn: str) -> None:
    await pg_queue.enqueue_many([Embed(uri="file:///c/1"), Embed(uri="file:///c/2")])
    conn = await asyncpg.connect(pg_dsn)
    try:
        for finish, left in (("ROLLBACK", 2), ("COMMIT", 0)):
            await conn.execute("BEGIN")
            assert await pg_queue.cancel(subject="file:///c", conn=conn) == 2
            await conn.execute(finish)
            assert await pg_queue.count(subject="file:///c") == left
    finally:
        await conn.close()


async def test_dedup_lock_taken_on_the_callers_connection_is_held_until_it_commits(
    pg_queue: Queue, pg_store: PostgresStore, pg_dsn: str
) -> None:
    """Rule 10 with ``conn=``: the caller's uncommitted insert is invisible to others, so a
    second enqueue with the key must wait for the caller's commit (the lock is the
    transaction's), then merge into the row it can now see instead of inserting a twin."""
    caller = await asyncpg.connect(pg_dsn)
    try:
        tx = caller.transaction()
        await tx.start()
        first = await pg_queue.enqueue(Refresh(uri="shared", version=1), conn=caller)
        second = asyncio.create_task(pg_queue.enqueue(Refresh(uri="shared", version=2)))

        async def waiting_on_an_advisory_lock() -> bool:
            assert not second.done(), "the second enqueue did not wait for the caller"
            return bool(await pg_store.pool.fetchval(QUEUED_BEHIND, caller.get_server_pid()))
        await wait_for(waiting_on_an_advisory_lock, what="the second enqueue to wait")
        assert not second.done()
        await tx.commit()
        merged = await asyncio.wait_for(second, 10)
    finally:
        await caller.close()
    assert merged == Enqueued(first.id, True)
    assert await pg_queue.count(kind="test.refresh") == 1
    assert [e.outcome for e in await pg_queue.journal(first.id)] == [Outcome.MERGED]


async def test_batches_of_the_same_keys_in_any_order_never_deadlock(
    pg_queue: Queue, pg_store: PostgresStore, pg_dsn: str
) -> None:
    """A batch takes every key's lock before its first insert, in the order of the locks'
    ids: two batches of the same keys in different orders then never hold one each while
    waiting for the other. Made deterministic: the caller (``conn=``) holds the key whose
    lock id is lower; a batch of [higher, lower] waits for it holding nothing, so the
    caller can take the higher key too and commit, and the batch merges into both. Taking
    the locks in the batch's order, it would hold the higher key while waiting, the
    caller's second enqueue would wait for it in turn, and PostgreSQL would roll the batch
    back (40P01, a DatabaseConflict)."""
    lock_id = {uri: await pg_store.pool.fetchval(
        "SELECT hashtextextended($1, 0)", dedup_lock_key(pg_store.prefix, "test.refresh", uri))
        for uri in ("one", "two")}
    low, high = sorted(lock_id, key=lambda uri: lock_id[uri])
    caller = await asyncpg.connect(pg_dsn)
    try:
        tx = caller.transaction()
        await tx.start()
        first_low = await pg_queue.enqueue(Refresh(uri=low), conn=caller)
        batch = asyncio.create_task(
            pg_queue.enqueue_many([Refresh(uri=high, version=1), Refresh(uri=low, version=1)]))

        async def waiting_on_the_caller() -> bool:
            assert not batch.done(), "the batch did not wait for the caller's key"
            return bool(await pg_store.pool.fetchval(QUEUED_BEHIND, caller.get_server_pid()))
        await wait_for(waiting_on_the_caller, what="the batch to wait for the lower key")
        first_high = await asyncio.wait_for(pg_queue.enqueue(Refresh(uri=high), conn=caller), 10)
        await tx.commit()
        ids = await asyncio.wait_for(batch, 10)
    finally:
        await caller.close()
    assert ids == [first_high.id, first_low.id]  # both merged into the caller's rows
    assert await pg_queue.count(kind="test.refresh") == 2
