"""``SyncQueue.result`` on PostgreSQL: the pending calls of all threads share one LISTEN
connection, held by one listener thread per SyncQueue, which reconnects when it is
lost (every call then reads its job again), closes once nobody has waited for two
seconds, stops at ``close()``, and is not the parent's in a forked child
(docs/concepts/results.md)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import select
import signal
import threading
import time
from typing import Any
from uuid import UUID

import psycopg
import pytest

import venturi
from tests.conftest import drop_prefix
from tests.sync_waits import Waiting, awaited, until, work
from venturi import DatabaseUnavailable, JobCancelled, JobFailed, SyncQueue
from venturi.results import LINGER
from venturi.store.base import Action
from venturi.sync import run_blocking
from venturi.testing.builders import request, settlement
from venturi.thread_results import ThreadWaiters

pytestmark = pytest.mark.timeout(90)


class Square(venturi.Task, kind="test.sync_results.square"):
    n: int

    async def run(self, ctx: venturi.Context) -> None:
        ctx.set_result({"square": self.n * self.n, "job": str(ctx.job_id)})


class Double(venturi.Task, kind="test.sync_results.double"):
    n: int

    async def run(self, ctx: venturi.Context) -> None:
        ctx.set_result(2 * self.n)


class Boom(venturi.Task, kind="test.sync_results.boom", max_failures=1):
    async def run(self, ctx: venturi.Context) -> None:
        raise ValueError("no")


def listen_pids(dsn: str, prefix: str) -> list[int]:
    """The backends LISTENing on the prefix's results channel."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND query LIKE 'LISTEN %%' AND query LIKE %s ORDER BY pid",
            (f"%{prefix}results%",)).fetchall()
    return [r[0] for r in rows]


def terminate(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


def waiters(sync: SyncQueue) -> ThreadWaiters:
    made = sync._results
    assert made is not None, "no result() call waited yet"
    return made


def test_concurrent_calls_share_one_listen_connection(
        sync_queue: SyncQueue, pg_dsn: str, prefix: str) -> None:
    jobs = [sync_queue.enqueue(Square(n=n)).id for n in range(20)]
    calls = [Waiting(sync_queue, id) for id in jobs]
    # Every call has read its job, which it does once LISTEN is active, and waits.
    until(lambda: awaited(pg_dsn, prefix, jobs) == len(jobs), "every call to read its job")
    assert len(listen_pids(pg_dsn, prefix)) == 1
    work(pg_dsn, prefix, Square)
    for n, (id, call) in enumerate(zip(jobs, calls, strict=True)):
        assert call.outcome() == {"square": n * n, "job": str(id)}
    assert waiters(sync_queue).opened == 1


def test_a_job_finished_while_the_listen_connection_was_lost(
        sync_queue: SyncQueue, pg_dsn: str, prefix: str) -> None:
    """Its notification reached no one: after listening again every call reads its
    job again, and returns."""
    store: Any = sync_queue.store
    down, up = threading.Event(), threading.Event()

    def held_back(_delay: float) -> None:
        down.set()
        assert up.wait(30)

    listen = store._q["listen_results"]
    sync_queue._results = ThreadWaiters(lambda: store.driver.blocking_listener(listen),
                                        sync_queue._watch, sleep=held_back)
    job = sync_queue.enqueue(Square(n=3))
    (claimed,) = run_blocking(store.claim(request(Square.__task__.kind, limit=1)))
    call = Waiting(sync_queue, job.id)
    until(lambda: awaited(pg_dsn, prefix, [job.id]), "the call to read its job")
    (pid,) = listen_pids(pg_dsn, prefix)
    terminate(pg_dsn, pid)
    assert down.wait(15), "the listener did not see its connection lost"
    until(lambda: not listen_pids(pg_dsn, prefix), "the killed session to end")
    # Finished while no session listens: its notification reaches no one.
    assert run_blocking(store.settle("w/1", settlement(claimed, Action.COMPLETE,
                                                       result='"late"')))
    assert call.thread.is_alive()
    up.set()
    assert call.outcome() == "late"
    assert waiters(sync_queue).relistened == 1


def test_a_read_on_a_lost_pool_connection_is_tried_again(pg_dsn: str, prefix: str) -> None:
    """The server dropped the pool's only connection while a call waited: its read
    after the notification fails, and it reads again on a new one."""
    with SyncQueue.connect(pg_dsn, prefix=prefix, min_size=1, max_size=1) as small:
        small.migrate()
        try:
            job = small.enqueue(Square(n=8)).id
            call = Waiting(small, job)
            until(lambda: awaited(pg_dsn, prefix, [job]), "the call to read its job")
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                (killed,) = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND query LIKE %s AND query NOT LIKE 'LISTEN %%'",
                    (f"%{prefix}jobs%",)).fetchone() or (0,)
            assert killed == 1
            work(pg_dsn, prefix, Square)
            assert call.outcome()["square"] == 64
            assert waiters(small).relistened == 0
        finally:
            asyncio.run(drop_prefix(pg_dsn, prefix))


def test_the_listen_connection_closes_when_idle_and_opens_again(
        sync_queue: SyncQueue, pg_dsn: str, prefix: str) -> None:
    for n in (1, 2):
        id = sync_queue.enqueue(Square(n=n)).id
        call = Waiting(sync_queue, id)
        until(lambda: awaited(pg_dsn, prefix, [id]), "the call to read its job")  # noqa: B023
        if n == 1:
            # Between the two calls the worker also shuts down, which a busy machine can
            # stretch past the two seconds a session lingers: a minute, for this step. A
            # session closed as soon as nobody waited would still be gone.
            waiters(sync_queue)._linger = 60
        work(pg_dsn, prefix, Square)
        assert call.outcome()["square"] == n * n
    # The second call, right after the first returned, found the session still open.
    assert waiters(sync_queue).opened == 1
    (pid,) = listen_pids(pg_dsn, prefix)
    waiters(sync_queue)._linger = LINGER
    # Nobody waits any more: closed after two seconds (and a tick).
    until(lambda: not listen_pids(pg_dsn, prefix), "the idle session to close", timeout=10)
    assert not waiters(sync_queue)._session
    third = sync_queue.enqueue(Square(n=3)).id
    call = Waiting(sync_queue, third)
    until(lambda: awaited(pg_dsn, prefix, [third]), "the call to read its job")
    assert listen_pids(pg_dsn, prefix) not in ([], [pid])
    work(pg_dsn, prefix, Square)
    assert call.outcome()["square"] == 9
    assert waiters(sync_queue).opened == 2


def test_close_stops_the_listener_at_once(sync_queue: SyncQueue, pg_dsn: str,
                                          prefix: str) -> None:
    own = SyncQueue.connect(pg_dsn, prefix=prefix)
    try:
        job = own.enqueue(Square(n=1)).id
        call = Waiting(own, job, timeout=None)
        until(lambda: awaited(pg_dsn, prefix, [job]), "the call to read its job")
        assert len(listen_pids(pg_dsn, prefix)) == 1
        thread = waiters(own)._session.thread  # type: ignore[union-attr]
        assert thread is not None and thread.is_alive()
        began = time.monotonic()
        own.close()
        # Not a wait for the call, which has no timeout, nor for the session to linger.
        assert time.monotonic() - began < 10
        assert not thread.is_alive()
        with pytest.raises(DatabaseUnavailable, match="closed"):
            call.outcome(timeout=5)
        until(lambda: not listen_pids(pg_dsn, prefix), "the session to close", timeout=5)
    finally:
        own.close()


def test_timeouts_and_every_outcome(sync_queue: SyncQueue, pg_dsn: str, prefix: str) -> None:
    pending = sync_queue.enqueue(Square(n=6)).id
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        sync_queue.result(pending, timeout=0.3)
    assert 0.3 <= time.monotonic() - began < 5
    with pytest.raises(TimeoutError):
        sync_queue.result(pending, timeout=dt.timedelta(milliseconds=50))
    with pytest.raises(TimeoutError):
        sync_queue.result(pending, timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        sync_queue.result(pending, timeout=-1)
    # Two calls on one job; the one that times out leaves the other waiting.
    patient, hasty = Waiting(sync_queue, pending), Waiting(sync_queue, pending, timeout=0.5)
    with pytest.raises(TimeoutError):
        hasty.outcome()
    doomed = sync_queue.enqueue(Boom()).id
    failing = Waiting(sync_queue, doomed)
    gone = sync_queue.enqueue(Double(n=1)).id
    cancelled = Waiting(sync_queue, gone)
    until(lambda: awaited(pg_dsn, prefix, [pending, doomed, gone]) == 3,
          "the calls to read their jobs")
    assert sync_queue.cancel(ids=[gone]) == 1
    with pytest.raises(JobCancelled):
        cancelled.outcome()
    work(pg_dsn, prefix, Square, Boom)
    assert patient.outcome() == {"square": 36, "job": str(pending)}
    with pytest.raises(JobFailed) as failed:
        failing.outcome()
    assert failed.value.reason == "ValueError"
    # Finished before the call: answered at once, even with timeout=0.
    assert sync_queue.result(str(pending), timeout=0)["square"] == 36
    with pytest.raises(JobFailed):
        sync_queue.result(doomed, timeout=0)
    with pytest.raises(JobCancelled):
        sync_queue.result(gone, timeout=0)
    with pytest.raises(JobCancelled):
        sync_queue.result(UUID(int=7), timeout=0)
    assert waiters(sync_queue).opened == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_listens_on_a_connection_of_its_own(
        sync_queue: SyncQueue, pg_dsn: str, prefix: str) -> None:
    """gunicorn --preload: the parent's listener thread is not in the child, and its
    connection is the parent's. The parent leaves the SyncQueue's pool alone while
    the child runs (a forked pool's connections are shared with the parent)."""
    ours = sync_queue.enqueue(Square(n=7)).id
    theirs = sync_queue.enqueue(Double(n=21)).id
    call = Waiting(sync_queue, ours)
    until(lambda: awaited(pg_dsn, prefix, [ours]), "the parent's call to read its job")
    (parents,) = listen_pids(pg_dsn, prefix)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        code = 1
        try:
            os.close(read)
            answer = sync_queue.result(theirs, timeout=30)
            os.write(write, json.dumps(answer).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        until(lambda: awaited(pg_dsn, prefix, [theirs]), "the child's call to read its job")
        pids = listen_pids(pg_dsn, prefix)
        assert len(pids) == 2 and parents in pids
        work(pg_dsn, prefix, Double)
        ready, _, _ = select.select([read], [], [], 30)
        assert ready, "the child's result() did not return"
        assert json.loads(os.read(read, 1000)) == 42
        _, status = os.waitpid(child, 0)
        child = 0
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(read)
        if child:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    until(lambda: listen_pids(pg_dsn, prefix) == [parents], "the child's session to close")
    work(pg_dsn, prefix, Square)
    assert call.outcome()["square"] == 49
    assert waiters(sync_queue).opened == 1

