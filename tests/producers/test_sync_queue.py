"""SyncQueue: Queue's surface as blocking calls on a psycopg pool, from plain threads with
no event loop, and none started for it; ``conn=`` on psycopg and SQLAlchemy."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

import venturi
from tests.producers.callers import BLOCKING_KINDS, BlockingCaller, blocking_caller
from tests.tasks import Embed, Refresh, Summarize, Urgent
from venturi import (
    Detail,
    Enqueued,
    MemoryStore,
    Page,
    Queue,
    Snapshot,
    Status,
    SyncQueue,
    Worker,
)


class Picky(venturi.Task, kind="test.producers.picky"):
    """Dedup on ``key``; ``refuse`` makes merge() answer what enqueue refuses."""

    key: str
    refuse: bool = False

    def dedup_key(self) -> str | None:
        return self.key

    def merge(self, pending: Picky, carry: Any) -> venturi.Merge:
        return venturi.With(Embed(uri="x")) if self.refuse else venturi.Replace()

    async def run(self, ctx: venturi.Context) -> None:
        return None


SURFACE = ["migrate", "enqueue", "enqueue_many", "job", "journal", "stats", "detail", "history",
           "dead_jobs", "claimed_jobs", "periodic_jobs", "finished_per_minute", "count",
           "workers", "drain", "cancel", "retry", "cleanup", "enqueue_workflow", "workflow"]


@pytest.fixture(params=BLOCKING_KINDS)
def caller(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[BlockingCaller]:
    with blocking_caller(request.param, pg_dsn) as made:
        yield made


def test_every_method_takes_the_queue_methods_arguments() -> None:
    for name in SURFACE:
        sync, asynchronous = getattr(SyncQueue, name), getattr(Queue, name)
        assert inspect.signature(sync) == inspect.signature(asynchronous), name
        assert sync.__doc__ == asynchronous.__doc__


def test_the_whole_surface_blocks_and_returns_what_queue_returns(
        sync_queue: SyncQueue) -> None:
    assert sync_queue.migrate() == []  # the fixture migrated
    one = sync_queue.enqueue(Embed(uri="file:///a"), delay=dt.timedelta(hours=1),
                             priority="high")
    assert isinstance(one, Enqueued) and not one.merged
    ids = sync_queue.enqueue_many([Embed(uri="file:///b"), Summarize(uri="file:///c"),
                                   ("test.embed", {"uri": "file:///d"})])
    assert len(ids) == 3
    assert sync_queue.enqueue(Refresh(uri="r")).merged is False
    assert sync_queue.enqueue(Refresh(uri="r", version=2)).merged is True
    record = sync_queue.job(str(one.id))
    assert record is not None and (record.priority, record.status) == (0, Status.PENDING)
    assert [e.outcome.value for e in sync_queue.journal(sync_queue.history(
        kind="test.refresh").jobs[0].id)] == ["merged"]
    stats = sync_queue.stats()
    assert isinstance(stats, Snapshot)
    assert stats.scheduled_by_kind == {"test.embed": 1}
    assert stats.pending_by_kind == {"test.embed": 2, "test.summarize": 1, "test.refresh": 1}
    assert isinstance(sync_queue.detail(limit=5), Detail)
    page = sync_queue.history(limit=2)
    assert isinstance(page, Page) and len(page.jobs) == 2 and page.next_cursor is not None
    rest = sync_queue.history(limit=10, before=page.next_cursor)
    assert len(rest.jobs) == 3 and rest.next_cursor is None
    assert sync_queue.count(subject="file:///a") == 1
    assert sync_queue.count(statuses=["pending"]) == 5
    assert sync_queue.cancel(subject="file:///a") == 1
    assert sync_queue.cancel(ids=[ids[0]]) == 1
    assert sync_queue.retry(kind="test.embed") == 0
    assert sync_queue.cleanup(finished_before=dt.datetime.now(dt.UTC)) == 0
    assert sync_queue.workers() == []
    sync_queue.drain()
    with pytest.raises(ValueError, match="needs ids=, subject= or workflow="):
        sync_queue.cancel()


def test_no_event_loop_and_no_thread_is_started_for_a_call(
        sync_queue: SyncQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    sync_queue.enqueue(Embed(uri="file:///warm"))  # the pool is up, its threads started

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("SyncQueue started an event loop or a thread")

    monkeypatch.setattr(asyncio, "new_event_loop", forbidden)
    monkeypatch.setattr(asyncio, "run", forbidden)
    monkeypatch.setattr(asyncio.BaseEventLoop, "run_until_complete", forbidden)
    monkeypatch.setattr(threading.Thread, "start", forbidden)
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    job = sync_queue.enqueue(Refresh(uri="r"))
    assert sync_queue.enqueue(Refresh(uri="r")).merged
    sync_queue.enqueue_many([Embed(uri=f"file:///{n}") for n in range(3)])
    assert sync_queue.count(kind="test.embed") == 4
    assert sync_queue.job(job.id) is not None


def test_threads_share_one_sync_queue(sync_queue: SyncQueue) -> None:
    """A WSGI server's worker threads: every call its own, dedup serialised by the
    database across threads."""

    def work(n: int) -> tuple[list[str], Enqueued]:
        own = [str(sync_queue.enqueue(Embed(uri=f"file:///{n}/{i}")).id) for i in range(20)]
        own += [str(i) for i in sync_queue.enqueue_many([Embed(uri=f"m/{n}")] * 5)]
        return own, sync_queue.enqueue(Refresh(uri="shared", version=n))

    threads = 8
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(work, range(threads)))
    ids = [i for own, _ in results for i in own]
    assert len(set(ids)) == len(ids) == threads * 25
    assert sync_queue.count(kind="test.embed") == threads * 25
    merges = [merged for _, merged in results]
    assert len({m.id for m in merges}) == 1
    assert sorted(m.merged for m in merges) == [False] + [True] * (threads - 1)
    assert len(sync_queue.journal(merges[0].id)) == threads - 1


def test_conn_joins_the_callers_transaction(
        sync_queue: SyncQueue, caller: BlockingCaller) -> None:
    sync_queue.enqueue(Refresh(uri="kept"))
    for finish, left in (("rollback", 0), ("commit", 4)):
        job = sync_queue.enqueue(Embed(uri=f"file:///{finish}"), conn=caller.conn)
        sync_queue.enqueue_many([Embed(uri="b"), Embed(uri="c")], conn=caller.conn)
        assert sync_queue.enqueue(Refresh(uri="kept", version=2), conn=caller.conn).merged
        assert sync_queue.job(job.id, conn=caller.conn) is not None
        assert sync_queue.count(kind="test.embed", conn=caller.conn) == 3
        assert sync_queue.job(job.id) is None  # not outside the transaction
        assert caller.in_transaction()  # venturi committed nothing
        (caller.commit if finish == "commit" else caller.rollback)()
        assert sync_queue.count(kind="test.embed") == (3 if left else 0)
    kept = sync_queue.history(kind="test.refresh").jobs[0]
    assert [e.outcome.value for e in sync_queue.journal(kept.id)] == ["merged"]
    assert sync_queue.cancel(subject="file:///commit", conn=caller.conn) == 1
    caller.rollback()
    assert sync_queue.count(subject="file:///commit") == 1


def test_an_autocommit_connection_commits_each_call(
        sync_queue: SyncQueue, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/integrations/producers.md: in autocommit mode a statement commits at once,
    and an operation of several (a dedup merge) runs in a transaction of its own."""
    idle = psycopg.pq.TransactionStatus.IDLE
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        first = sync_queue.enqueue(Picky(key="k"), conn=conn)
        assert sync_queue.job(first.id) is not None  # committed, seen from the pool
        merged = sync_queue.enqueue(Picky(key="k"), conn=conn)
        assert merged == Enqueued(first.id, True)
        assert conn.info.transaction_status == idle
        assert [e.outcome.value for e in sync_queue.journal(first.id)] == ["merged"]
        # A merge that fails half-way (its merge() answers what enqueue refuses)
        # leaves nothing: the transaction that took the key's lock and read the
        # candidate is rolled back, lock included.
        with pytest.raises(venturi.InvalidJob, match="same kind"):
            sync_queue.enqueue(Picky(key="k", refuse=True), conn=conn)
        assert conn.info.transaction_status == idle
        assert sync_queue.count(kind="test.producers.picky") == 1
        assert len(sync_queue.journal(first.id)) == 1
        assert sync_queue.enqueue(Picky(key="k")).merged


def test_sync_queue_on_memory_store_runs_users_tests_without_a_database() -> None:
    store = MemoryStore()
    queue = SyncQueue(store)
    queue.migrate()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: queue.enqueue(Embed(uri=f"file:///{n}")), range(40)))
    assert queue.count(kind="test.embed") == 40
    # The worker runs on the asyncio Queue over the same store.
    asyncio.run(Worker(Queue(store), tasks=[Embed]).run(until_empty=True))
    assert queue.count(kind="test.embed", statuses=["completed"]) == 40


def test_a_plain_task_on_conn_joins_the_callers_transaction(
        sync_queue: SyncQueue, caller: BlockingCaller) -> None:
    """SyncQueue.enqueue's plain path (Store.enqueue_plain) on each blocking caller
    connection: gone with a rollback, kept by a commit, the general path's row."""
    gone = sync_queue.enqueue(Urgent(n=1), conn=caller.conn)
    assert caller.in_transaction()
    caller.rollback()
    assert sync_queue.job(gone.id) is None
    fast = sync_queue.enqueue(Urgent(n=2), conn=caller.conn)
    slow = sync_queue.enqueue(Urgent(n=2), priority="high", conn=caller.conn)
    assert sync_queue.job(fast.id) is None
    caller.commit()
    rows = [sync_queue.job(fast.id), sync_queue.job(slow.id)]
    assert rows[0] is not None and rows[1] is not None
    assert (rows[0].kind, rows[0].payload, rows[0].priority, rows[0].max_failures) == (
        rows[1].kind, rows[1].payload, rows[1].priority, rows[1].max_failures)
