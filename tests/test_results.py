"""Results end to end on PostgreSQL: a worker's ``ctx.set_result`` awaited with
``Queue.result`` and ``SyncQueue.result``, the size limit, and a LISTEN connection
lost while a caller waits (docs/concepts/results.md)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

import venturi
from benchmarks.harness import drop_prefix
from tests.conftest import wait_for
from venturi import JobFailed, Queue, SyncQueue
from venturi.results import Waiters
from venturi.store.base import Action
from venturi.store.postgres import PostgresStore
from venturi.testing.builders import request, settlement

pytestmark = pytest.mark.timeout(60)


class Answer(venturi.Task, kind="test.results.answer"):
    n: int

    async def run(self, ctx: venturi.Context) -> None:
        ctx.set_result({"square": self.n * self.n, "job": str(ctx.job_id)})


class TooBig(venturi.Task, kind="test.results.too_big", max_failures=1):
    async def run(self, ctx: venturi.Context) -> None:
        ctx.set_result("x" * 200)


class NotJson(venturi.Task, kind="test.results.not_json", max_failures=1):
    async def run(self, ctx: venturi.Context) -> None:
        ctx.set_result({1, 2})


@pytest.fixture
async def pg_queue(pg_dsn: str, prefix: str) -> AsyncIterator[Queue]:
    async with Queue.connect(pg_dsn, prefix=prefix, max_payload_bytes=100) as queue:
        await queue.migrate()
        try:
            yield queue
        finally:
            await drop_prefix(pg_dsn, prefix)


async def test_a_workers_result_is_awaited_and_shown(pg_queue: Queue) -> None:
    job = await pg_queue.enqueue(Answer(n=7))
    waiting = asyncio.create_task(pg_queue.result(job.id, timeout=20))
    worker = venturi.Worker(pg_queue, tasks=[Answer], concurrency=2)
    await worker.run(until_empty=True)
    assert await waiting == {"square": 49, "job": str(job.id)}
    record = await pg_queue.job(job.id)
    assert record is not None and record.result == {"square": 49, "job": str(job.id)}


async def test_a_result_over_the_limit_or_not_json_fails_the_run_clearly(
        pg_queue: Queue) -> None:
    big = await pg_queue.enqueue(TooBig())
    odd = await pg_queue.enqueue(NotJson())
    worker = venturi.Worker(pg_queue, tasks=[TooBig, NotJson], concurrency=2)
    await worker.run(until_empty=True)
    with pytest.raises(JobFailed) as failed:
        await pg_queue.result(big.id, timeout=5)
    assert failed.value.reason == "venturi.errors.InvalidJob"
    with pytest.raises(JobFailed):
        await pg_queue.result(odd.id, timeout=5)
    with pytest.raises(venturi.InvalidJob, match="result is 202 bytes, over the 100-byte"):
        venturi.Context(job_id=big.id, kind="k", run_no=1, carry=None, state=None,
                        result_limit=100).set_result("x" * 200)
    with pytest.raises(venturi.InvalidJob, match="result is not JSON-serializable"):
        venturi.Context(job_id=big.id, kind="k", run_no=1, carry=None, state=None
                        ).set_result(object())


async def _listen_pids(store: PostgresStore) -> list[int]:
    async with store.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE $1",
            f"%{store.prefix}results%")
    return [r[0] for r in rows]


async def test_a_result_finished_while_the_listen_connection_was_lost(
        pg_queue: Queue) -> None:
    """The notification sent while nobody listened is lost: after listening again the
    waiter reads its job again, and returns."""
    store = pg_queue.store
    assert isinstance(store, PostgresStore)
    down = asyncio.Event()
    up = asyncio.Event()

    async def held_back(_delay: float) -> None:
        down.set()
        await up.wait()

    waiters = pg_queue._waiters = Waiters(store, sleep=held_back)
    job = await pg_queue.enqueue(Answer(n=3))
    claimed = await store.claim(request(Answer.__task__.kind, limit=1))
    waiting = asyncio.create_task(pg_queue.result(job.id, timeout=20))
    await wait_for(lambda: _listen_pids(store), what="the results LISTEN session")
    (pid,) = await _listen_pids(store)
    async with store.pool.acquire() as conn:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
    async with asyncio.timeout(10):
        await down.wait()
    # Finished while no session listens: its notification reaches no one.
    assert await store.settle("w/1", settlement(claimed[0], Action.COMPLETE, result='"late"'))
    assert not waiting.done()
    up.set()
    assert await waiting == "late"
    assert waiters.relistened == 1


def test_sync_queue_result_blocks_until_the_worker_finished(pg_dsn: str, prefix: str) -> None:
    with SyncQueue.connect(pg_dsn, prefix=prefix) as sync:
        sync.migrate()
        try:
            job = sync.enqueue(Answer(n=5))
            got: dict[str, Any] = {}

            def wait() -> None:
                got["value"] = sync.result(job.id, timeout=20)

            waiter = threading.Thread(target=wait)
            waiter.start()

            async def work() -> None:
                async with Queue.connect(pg_dsn, prefix=prefix) as queue:
                    await venturi.Worker(queue, tasks=[Answer]).run(until_empty=True)

            asyncio.run(work())
            waiter.join(20)
            assert got["value"] == {"square": 25, "job": str(job.id)}
            assert sync.result(str(job.id), timeout=0) == got["value"]
            pending = sync.enqueue(Answer(n=1))
            with pytest.raises(TimeoutError):
                sync.result(pending.id, timeout=0.2)
            assert sync.cancel(ids=[pending.id]) == 1
            with pytest.raises(venturi.JobCancelled):
                sync.result(pending.id, timeout=1)
        finally:
            asyncio.run(drop_prefix(pg_dsn, prefix))
