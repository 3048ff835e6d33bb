"""The bulk enqueue path's shortcuts keep the slow path's results exactly."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
import uuid
from typing import Any

import asyncpg
import pytest

import venturi
from tests.tasks import Embed, Summarize, Tick, Urgent
from venturi import InvalidJob, ManualClock, Queue, _ids
from venturi._codec import dumps
from venturi._ids import uuid7, uuid7_many
from venturi.newjob import JobBuilder
from venturi.store.base import NewJob
from venturi.store.postgres import COPY_MIN_ROWS, PostgresStore


class Bare(venturi.Task, kind="test.fast.bare"):
    """No subject, dedup key or limit key: a batch of these is built column by column."""

    data: Any = None

    async def run(self, ctx: venturi.Context) -> None:
        return None


def test_a_batch_of_one_plain_class_is_built_as_the_general_loop_builds_it() -> None:
    builder = JobBuilder(1024, lambda: dt.datetime.now(dt.UTC))
    items = [Bare(data=n) for n in range(5)] + [Bare(), Bare(data={"x": None, "y": [1.5]})]
    batch = builder.plain_batch(items, trace_context='{"t": 1}')
    assert batch is not None
    assert batch.payloads == [dumps(t) for t in items]
    assert batch.kinds == ["test.fast.bare"] * 7 and batch.priorities == [1] * 7
    assert batch.max_failures == [25] * 7 and batch.subjects is None and batch.periodic is None
    assert batch.trace_context == '{"t": 1}' and batch.ids == sorted(batch.ids)


@pytest.mark.parametrize(("bad", "says"), [
    (float("nan"), "NaN or Infinity"), ({"a": [float("-inf")]}, "NaN or Infinity"),
    ("a\x00b", "NUL"), (object(), "not JSON-serializable"), ("x" * 300, "over the 256-byte"),
])
def test_a_batch_of_one_plain_class_names_its_bad_item(bad: Any, says: str) -> None:
    builder = JobBuilder(256, lambda: dt.datetime.now(dt.UTC))
    with pytest.raises(InvalidJob) as info:
        builder.plain_batch([Bare(data=1), Bare(data=None), Bare(data=bad), Bare(data=3)])
    assert info.value.index == 2 and says in str(info.value)


@pytest.mark.parametrize("counter", [0, 5, 0xFF0, 0xFFF])
@pytest.mark.parametrize("n", [1, 2, 4_096, 9_000])
def test_uuid7_many_counts_on_as_uuid7_would(
        counter: int, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within one millisecond of the clock, n ids take the next n counter values and
    pass into the next millisecond at 0xFFF, exactly as n calls of uuid7() do."""
    ahead = time.time_ns() // 1_000_000 + 10**6  # the clock stays behind: no new ms
    monkeypatch.setattr(_ids, "_last_ms", ahead)
    monkeypatch.setattr(_ids, "_seq", counter)
    made = [(u.int >> 80, u.int >> 64 & 0xFFF) for u in uuid7_many(n)]
    state = (_ids._last_ms, _ids._seq)
    monkeypatch.setattr(_ids, "_last_ms", ahead)
    monkeypatch.setattr(_ids, "_seq", counter)
    one_by_one = [(u.int >> 80, u.int >> 64 & 0xFFF) for u in (uuid7() for _ in range(n))]
    assert made == one_by_one and state == (_ids._last_ms, _ids._seq)


def test_uuid7_many_matches_uuid7() -> None:
    ids = [uuid7(), *uuid7_many(5_000), uuid7(), *uuid7_many(1_000), *uuid7_many(1), uuid7()]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for u in ids:
        assert u.version == 7 and u.variant == uuid.RFC_4122
        assert uuid.UUID(int=u.int) == u and hash(uuid.UUID(str(u))) == hash(u)
    assert uuid7_many(0) == []


async def test_enqueue_many_all_defaults(queue: Queue, clock: ManualClock) -> None:
    # Every optional column at its default: the store may send them as NULL arrays.
    ids = await queue.enqueue_many([Urgent(n=i) for i in range(3)])
    for id in ids:
        row = await queue.job(id)
        assert row is not None
        assert (row.visible_at, row.subject, row.dedup_key, row.periodic, row.carry) == (
            clock.now(), None, None, False, None)
        assert row.priority == 0


async def test_enqueue_many_mixed_columns(queue: Queue, clock: ManualClock) -> None:
    later = clock.now() + dt.timedelta(hours=1)
    ids = await queue.enqueue_many([
        Urgent(n=1), Embed(uri="file:///x/1"), ("test.summarize", {"uri": "file:///y"}),
        Summarize(uri="file:///z", words=5),
    ])
    rows = [await queue.job(i) for i in ids]
    assert [r.subject for r in rows if r] == [None, "file:///x/1", "file:///y", "file:///z"]
    assert [r.priority for r in rows if r] == [0, 1, 2, 2]
    assert all(r and r.visible_at == clock.now() for r in rows)
    one = await queue.enqueue(Embed(uri="file:///w"), at=later)
    row = await queue.job(one.id)
    assert row is not None and row.visible_at == later


async def test_pool_release_leaves_no_session_lock(pg_store: PostgresStore, pg_dsn: str) -> None:
    # Pool connections are not reset on release: migrate must not leave its lock behind.
    await pg_store.migrate()
    async with pg_store.pool.acquire() as c:
        pid = await c.fetchval("SELECT pg_backend_pid()")
    conn = await asyncpg.connect(pg_dsn)
    try:
        held = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1", pid)
    finally:
        await conn.close()
    assert held == 0


BIG = COPY_MIN_ROWS


async def _count(store: PostgresStore) -> dict[str, int]:
    async with store.pool.acquire() as c:
        rows = await c.fetch(f"SELECT kind, count(*) FROM {store.prefix}jobs GROUP BY kind")
    return {r[0]: r[1] for r in rows}


async def test_large_batch_by_copy_keeps_rows_and_notifies(
    pg_store: PostgresStore, clock: ManualClock
) -> None:
    queue = Queue(pg_store)
    items = [Embed(uri=f"file:///big/{i}") if i % 2 else Urgent(n=i) for i in range(BIG)]
    async with pg_store.listen() as listener:
        ids = await queue.enqueue_many(items)
        woken = {(await asyncio.wait_for(listener.receive(), 10))[1] for _ in range(2)}
    assert woken == {"test.embed", "test.urgent"}
    assert await _count(pg_store) == {"test.embed": BIG // 2, "test.urgent": BIG // 2}
    first, second = await queue.job(ids[0]), await queue.job(ids[1])
    assert first is not None and second is not None
    assert (first.kind, first.priority, first.subject, first.payload) == (
        "test.urgent", 0, None, {"n": 0})
    assert (second.kind, second.subject, second.max_failures) == (
        "test.embed", "file:///big/1", 3)
    assert first.visible_at == first.created_at == clock.now()


async def test_large_batch_on_database_clock(pg_store_dbclock: PostgresStore) -> None:
    queue = Queue(pg_store_dbclock)
    before = await pg_store_dbclock.db_now()
    ids = await queue.enqueue_many([Urgent(n=i) for i in range(BIG)])
    after = await pg_store_dbclock.db_now()
    row = await queue.job(ids[-1])
    assert row is not None and before <= row.created_at == row.visible_at <= after


async def test_large_batch_is_atomic(pg_store: PostgresStore, pg_dsn: str) -> None:
    queue = Queue(pg_store)
    items: list[Any] = [Urgent(n=i) for i in range(BIG)]
    items[-1] = ("test.urgent", {"n": 1, "bogus": True})
    with pytest.raises(InvalidJob) as err:
        await queue.enqueue_many(items)
    assert err.value.index == BIG - 1
    conn = await asyncpg.connect(pg_dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        await queue.enqueue_many(items[:-1], conn=conn)
        await tx.rollback()
        await conn.execute("BEGIN")  # a caller's plain BEGIN: the COPY nests in a savepoint
        await queue.enqueue_many(items[:-1], conn=conn)
        assert await conn.fetchval(f"SELECT count(*) FROM {pg_store.prefix}jobs") == BIG - 1
        await conn.execute("ROLLBACK")
    finally:
        await conn.close()
    assert await _count(pg_store) == {}


class Keyed(venturi.Task, kind="test.fast.keyed"):
    """A limit key: its jobs are not plain."""

    shard: str = "a"

    def limit_key(self) -> str | None:
        return self.shard

    async def run(self, ctx: venturi.Context) -> None:
        return None


def test_plain_job_is_new_jobs_row_for_a_plain_class() -> None:
    builder = JobBuilder(1024, lambda: dt.datetime.now(dt.UTC))
    for task in (Urgent(n=7), Bare(data={"x": [1.5, None], "é": "\u2028"}), Bare()):
        plain = builder.plain_job(task)
        job, _ = builder.new_job(task)
        assert plain is not None and plain.id < builder.new_job(task)[0].id
        assert plain.job() == NewJob(plain.id, job.kind, job.payload, priority=job.priority,
                                     max_failures=job.max_failures)
        assert plain.job() == dataclasses.replace(job, id=plain.id)


@pytest.mark.parametrize("task", [Embed(uri="x"), Summarize(uri="y"), Keyed(), Tick()],
                         ids=["subject", "subject-low", "limit-key", "periodic"])
def test_plain_job_leaves_every_other_class_to_new_job(task: Any) -> None:
    builder = JobBuilder(1024, lambda: dt.datetime.now(dt.UTC))
    assert builder.plain_job(task) is None
    assert builder.plain_job(("test.urgent", {"n": 1})) is None
    assert builder.plain_job(object()) is None


@pytest.mark.parametrize("bad", [float("nan"), "a\x00b", object(), "x" * 300, 2**70],
                         ids=["nan", "nul", "object", "size", "big-int"])
def test_plain_job_refuses_a_payload_in_new_jobs_words(bad: Any) -> None:
    builder = JobBuilder(256, lambda: dt.datetime.now(dt.UTC))
    with pytest.raises(InvalidJob) as fast:
        builder.plain_job(Bare(data=bad))
    with pytest.raises(InvalidJob) as slow:
        builder.new_job(Bare(data=bad))
    assert str(fast.value) == str(slow.value) and fast.value.index is None
