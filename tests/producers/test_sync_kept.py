"""SyncQueue's driver keeps the connection a statement used, with its cursor, for the next
statement of any thread (``PsycopgDriver._take``): reuse without a pool round trip, and
none of the ways a kept connection could go wrong (held past close or past LINGER,
reused after an error, left in a transaction, leaving a thread that asks the pool to
wait for it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import psycopg_pool
import pytest

from tests.conftest import drop_prefix
from tests.tasks import Embed, Refresh, Urgent
from venturi import DatabaseError, SyncQueue
from venturi.store.postgres import psycopg_driver


def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.fixture
def small(pg_dsn: str, prefix: str) -> Iterator[SyncQueue]:
    """A SyncQueue whose pool has a single connection: a leak of it shows as a timeout."""
    try:
        with SyncQueue.connect(pg_dsn, prefix=prefix, min_size=1, max_size=1,
                               connect_timeout=3) as queue:
            queue.migrate()
            yield queue
    finally:
        asyncio.run(drop_prefix(pg_dsn, prefix))


def driver(queue: SyncQueue) -> Any:
    return queue.store.driver  # type: ignore[attr-defined]


def count_getconn(queue: SyncQueue, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pool = driver(queue).pool
    calls = [0]
    original = pool.getconn

    def getconn(*args: Any, **kw: Any) -> Any:
        calls[0] += 1
        return original(*args, **kw)

    monkeypatch.setattr(pool, "getconn", getconn)
    return calls


def test_consecutive_statements_reuse_one_connection(
        small: SyncQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psycopg_driver, "LINGER", 3600)
    calls = count_getconn(small, monkeypatch)
    for n in range(20):
        small.enqueue(Embed(uri=f"file:///{n}"))
    small.enqueue_many([Embed(uri="a"), Embed(uri="b")])
    small.enqueue(Refresh(uri="r"))  # dedup: several statements in one transaction
    assert small.count(kind="test.embed") == 22
    assert calls[0] <= 1
    ((c, _cursor),) = driver(small)._idle
    assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_kept_connection_goes_back_to_the_pool_when_idle(
        small: SyncQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    # Long enough that the sweeper thread cannot give the connection back before this
    # thread, descheduled a while on a busy machine, has looked.
    monkeypatch.setattr(psycopg_driver, "LINGER", 1.0)
    small.enqueue(Embed(uri="file:///a"))
    assert driver(small)._idle
    until(lambda: not driver(small)._idle, "the kept connection to go back")
    # The pool's only connection is back: a direct checkout gets it at once.
    with driver(small).pool.connection(timeout=2) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    small.enqueue(Embed(uri="file:///b"))  # and kept again, then given back again
    until(lambda: not driver(small)._idle, "the kept connection to go back again")


def test_close_returns_the_kept_connection(
        pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psycopg_driver, "LINGER", 3600)
    queue = SyncQueue.connect(pg_dsn, prefix=prefix, min_size=1, max_size=1)
    try:
        queue.migrate()
        queue.enqueue(Embed(uri="file:///a"))
        ((kept, _cursor),) = driver(queue)._idle
        started = time.monotonic()
        queue.close()
        assert time.monotonic() - started < 3
        assert not driver(queue)._idle and not driver(queue)._sweeper.is_alive()
        assert kept.closed  # the pool closed it: it was back in the pool
    finally:
        queue.close()
        asyncio.run(drop_prefix(pg_dsn, prefix))


def test_a_connection_is_not_kept_after_a_failed_statement(
        small: SyncQueue, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psycopg_driver, "LINGER", 3600)
    small.enqueue(Embed(uri="file:///a"))
    ((kept, _cursor),) = driver(small)._idle
    with psycopg.connect(pg_dsn, autocommit=True) as other:  # killed behind the store's back
        other.execute("SELECT pg_terminate_backend(%s)", (kept.info.backend_pid,))
    with pytest.raises(DatabaseError):
        small.enqueue(Embed(uri="file:///b"))
    assert not driver(small)._idle
    small.enqueue(Embed(uri="file:///c"))  # on the connection the pool made instead
    ((again, _cursor),) = driver(small)._idle
    assert again is not kept
    assert small.count(kind="test.embed") == 2


def test_a_thread_waiting_for_the_pool_gets_a_connection_put_back(
        small: SyncQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight threads on a pool of one: a connection put back while another thread waits
    for the pool goes to that thread, not to the sweeper's next round (an hour here;
    the pool's timeout is 3 s, so a thread left waiting fails)."""
    monkeypatch.setattr(psycopg_driver, "LINGER", 3600)

    def work(t: int) -> int:
        for n in range(25):
            small.enqueue(Embed(uri=f"file:///{t}/{n}"))
        return small.count(kind="test.embed")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert small.count(kind="test.embed") == 200
    assert len(driver(small)._idle) <= 1


def test_a_callers_pool_lends_nothing_out(pg_dsn: str, prefix: str) -> None:
    """``from_pool``: the pool is shared with the caller's own code, which could not
    take a kept connection; and in a pool not in autocommit mode a statement is
    committed before its connection goes back."""
    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        pg_dsn, min_size=1, max_size=1, open=True)
    try:
        queue = SyncQueue.from_pool(pool, prefix=prefix)
        queue.migrate()
        queue.enqueue(Embed(uri="file:///a"))
        assert not driver(queue)._idle
        with pool.connection(timeout=2) as c:
            assert c.execute(f"SELECT count(*) FROM {prefix}jobs").fetchone() == (1,)
    finally:
        pool.close()
        asyncio.run(drop_prefix(pg_dsn, prefix))


def test_a_batch_by_copy_commits_with_its_wake_up_or_not_at_all(
        small: SyncQueue, pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``copy_min_rows`` rows SyncQueue's enqueue_many goes by COPY: the rows and one
    wake-up per kind in one transaction, its own or the caller's (``conn=``)."""
    from venturi.store.postgres.psycopg_executors import PsycopgExecutor

    monkeypatch.setattr(driver(small), "copy_min_rows", 3)
    copies = []
    original = PsycopgExecutor.copy

    async def copy(self: PsycopgExecutor, *args: Any) -> None:
        copies.append(args[2])  # the columns
        await original(self, *args)

    monkeypatch.setattr(PsycopgExecutor, "copy", copy)
    batch = [Embed(uri=f"file:///{n}") for n in range(3)] + [Urgent(n=1)]
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {prefix}jobs")

        def wake_ups() -> list[str]:
            listener.execute(f"SELECT pg_notify('{prefix}jobs', 'marker')")
            seen = []
            for n in listener.notifies(timeout=10):
                if n.payload == "marker":
                    return seen
                seen.append(n.payload)
            raise AssertionError("the marker never came")

        small.enqueue_many(batch)
        assert small.count() == 4
        assert sorted(wake_ups()) == ["test.embed", "test.urgent"]
        with psycopg.connect(pg_dsn) as caller:
            small.enqueue_many(batch, conn=caller)
            assert small.count(conn=caller) == 8
            caller.rollback()
            assert small.count() == 4 and wake_ups() == []
            small.enqueue_many(batch, conn=caller)
            caller.commit()
            assert small.count() == 8
            assert sorted(wake_ups()) == ["test.embed", "test.urgent"]
    # Embed has a subject, Urgent none; no row is periodic: that column is left out.
    assert copies == [["id", "kind", "payload", "priority", "max_failures", "subject"]] * 3
