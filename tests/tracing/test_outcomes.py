"""The outcome on each ``process`` span is what its settlement does (venturi.store.lifecycle):
beside those seen across processes (test_worker_process.py), a pause, a give-up, a
timeout, a payload that no longer decodes, a release by the drain, and a run whose claim
was lost (no settlement)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

import venturi
from venturi import MemoryStore, Queue
from venturi.store.postgres import PostgresStore
from venturi.testing.builders import add, new_job

from ..conftest import wait_for
from .recording import Recorded
from .tasks import Stuck

pytestmark = pytest.mark.timeout(60)


class Pausing(venturi.Task, kind="trace.pausing"):
    async def run(self, ctx: venturi.Context) -> venturi.Pause | None:
        return venturi.Pause(dt.timedelta(0)) if ctx.run_no == 1 else None


class Quitting(venturi.Task, kind="trace.quitting"):
    async def run(self, ctx: venturi.Context) -> None:
        raise venturi.GiveUp("unsupported-format")


class Slow(venturi.Task, kind="trace.slow", timeout=dt.timedelta(seconds=0.2), max_failures=1):
    async def run(self, ctx: venturi.Context) -> None:
        await asyncio.sleep(3600)


class Shaped(venturi.Task, kind="trace.shaped"):
    n: int = 0

    async def run(self, ctx: venturi.Context) -> None:
        return None


def outcomes(spans: Recorded, kind: str) -> list[tuple[Any, ...]]:
    return [(s["attributes"]["messaging.venturi.run_number"],
             s["attributes"]["messaging.venturi.outcome"], s["status"], s["description"],
             s["attributes"].get("error.type"), s["exceptions"])
            for s in spans.named(f"process {kind}")]


async def test_outcomes_of_runs(spans: Recorded) -> None:
    queue = Queue(MemoryStore())
    await queue.enqueue(Pausing())
    await queue.enqueue(Quitting())
    await queue.enqueue(Slow())
    # A stored payload the task no longer accepts (docs/concepts/failures.md).
    await add(queue.store, new_job("trace.shaped", payload={"n": "not a number"}))
    stuck = await queue.enqueue(Stuck())
    worker = venturi.Worker(queue, tasks=[Pausing, Quitting, Slow, Shaped, Stuck], concurrency=5)
    running = asyncio.create_task(worker.run())

    async def settled() -> bool:
        row = await queue.job(stuck.id)
        return (row is not None and row.run_count == 1
                and worker.progress.completed == 1 and worker.progress.dead == 3)
    try:
        await wait_for(settled, timeout=20, what="the runs to settle")
    finally:
        await asyncio.wait_for(worker.drain(grace=0), 10)
        await running
    assert outcomes(spans, "trace.pausing") == [
        (1, "paused", "UNSET", None, None, []), (2, "completed", "UNSET", None, None, [])]
    assert outcomes(spans, "trace.quitting") == [
        (1, "dead", "ERROR", "unsupported-format", "venturi.task.GiveUp",
         ["venturi.task.GiveUp"])]
    assert outcomes(spans, "trace.slow") == [(1, "dead", "ERROR", "timeout", "timeout", [])]
    (decoding,) = outcomes(spans, "trace.shaped")
    assert decoding[:3] == (1, "dead", "ERROR") and decoding[3] == decoding[4]
    assert decoding[3].startswith("payload-") and decoding[5] == [
        "venturi.errors.PayloadDecodeError"]
    assert outcomes(spans, "trace.stuck") == [(1, "released", "UNSET", None, None, [])]


class HeldBack(venturi.Task, kind="trace.held-back", lease=dt.timedelta(seconds=1)):
    """Waits on its first run (until its claim is lost), completes on its second."""

    async def run(self, ctx: venturi.Context) -> None:
        if ctx.run_no == 1:
            await asyncio.sleep(3600)


async def test_a_lost_claim_is_a_failed_run(
        pg_store_dbclock: PostgresStore, spans: Recorded) -> None:
    queue = Queue(pg_store_dbclock)
    job = await queue.enqueue(HeldBack())
    worker = venturi.Worker(queue, tasks=[HeldBack], concurrency=1)
    running = asyncio.create_task(worker.run())

    async def claimed() -> bool:
        row = await queue.job(job.id)
        return row is not None and row.run_count == 1 and row.claimed_by is not None

    async def completed() -> bool:
        row = await queue.job(job.id)
        return row is not None and row.status is venturi.Status.COMPLETED
    try:
        await wait_for(claimed, timeout=20, what="the first run")
        # The claim taken away under the running job, as a reaper would after a stall:
        # the worker's next renewal finds it gone and stops the run.
        await pg_store_dbclock.pool.execute(
            f"UPDATE {queue.prefix}jobs SET status = 'pending', claimed_by = NULL,"
            " claim_expires_at = NULL WHERE id = $1", job.id)
        await wait_for(completed, timeout=20, what="the second run to complete")
    finally:
        await asyncio.wait_for(worker.drain(grace=0), 10)
        await running
    assert outcomes(spans, "trace.held-back") == [
        (1, "lease-lost", "ERROR", "lease-lost", "lease-lost", []),
        (2, "completed", "UNSET", None, None, [])]
