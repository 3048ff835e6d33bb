"""A drain to empty (``Worker.run(until_empty=True)``) ends only when no runnable job of
its kinds is left, including one its claim skipped because another transaction held
the row locked (venturi/worker/claimer.py; Store.runnable_left)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

import venturi
from venturi import Queue, Status
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .spies import record

pytestmark = pytest.mark.timeout(60)


class Echo(venturi.Task, kind="wu.echo"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Paused(venturi.Task, kind="wu.paused"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Limited(venturi.Task, kind="wu.limited", concurrency=5):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Other(venturi.Task, kind="wu.other"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


@pytest.mark.parametrize("task", [Echo, Limited], ids=["plain", "limited"])
async def test_a_drain_to_empty_waits_for_a_runnable_job_another_transaction_holds(
        pg_store_dbclock: PostgresStore, pg_dsn: str, monkeypatch: pytest.MonkeyPatch,
        task: type[venturi.Task]) -> None:
    """A result() caller flags the job's row (inspect.sql, watch_job) in a transaction of
    its own; a claim meanwhile skips the row and comes back empty. The drain must not
    take that for an empty queue: it ran the job in none of the cases before this rule
    where the flag's transaction was still open at the worker's first claim. A limited
    kind with room is no different (its claim, claim_limited, skips the row as well)."""
    store = pg_store_dbclock
    queue = Queue(store)
    job = await queue.enqueue(task())
    calls = record(monkeypatch, store, "claim_limited" if task is Limited else "claim")

    def claims() -> list[int]:
        return [len(c.result if task is Echo else c.result.jobs)
                for c in calls if c.ended is not None]

    holder: Any = await asyncpg.connect(pg_dsn)
    try:
        flag = holder.transaction()
        await flag.start()
        await holder.execute(f"UPDATE {store.prefix}jobs SET awaited = true WHERE id = $1",
                             job.id)
        worker = venturi.Worker(queue, tasks=[task], concurrency=2)
        drain = asyncio.create_task(worker.run(until_empty=True))
        await wait_for(lambda: len(claims()) >= 3 or drain.done(), what="three claims")
        assert not drain.done(), "the drain ended with a runnable job left"
        assert claims()[:3] == [0, 0, 0]
        await flag.commit()  # no wake-up: the drain finds the job by claiming again
        await asyncio.wait_for(drain, 15)
    finally:
        await holder.close()
    row = await queue.job(job.id)
    assert row is not None and row.status is Status.COMPLETED and row.run_count == 1
    made = claims()
    assert set(made) == {0, 1} and made.count(1) == 1  # the job claimed once, after the lock


async def test_a_drain_to_empty_still_ends_beside_rows_it_does_not_take(
        pg_store_dbclock: PostgresStore) -> None:
    """Runnable rows of a kind this worker does not run, or of a paused kind, do not
    keep a drain to empty going."""
    queue = Queue(pg_store_dbclock)
    await queue.pause("wu.paused")
    await queue.enqueue_many([Other(), Paused(), Echo()])
    worker = venturi.Worker(queue, tasks=[Echo, Paused], concurrency=2)
    await asyncio.wait_for(worker.run(until_empty=True), 15)
    counts = {k: await queue.count(kind=k, statuses=[Status.PENDING])
              for k in ("wu.echo", "wu.other", "wu.paused")}
    assert counts == {"wu.echo": 0, "wu.other": 1, "wu.paused": 1}
