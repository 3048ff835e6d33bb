"""The worker re-reads the kinds' rows in the background, never before a claim
(docs/concepts/flow-control.md, "When a change takes effect"): a change reaches a running
worker on its control message or, if that was lost, within a heartbeat interval, and
wakes the claimer; an idle worker's pickup never waits for a re-read."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import asyncpg
import pytest

import venturi
from venturi import Queue, Status

from ..conftest import wait_for
from .conftest import running

pytestmark = pytest.mark.timeout(60)
NEVER = dt.timedelta(seconds=60)  # no poll (nor heartbeat) within a test
FIRST_POLL = 1.0  # the poller's first interval: it starts before LISTEN (worker/waker.py)


async def past_the_first_poll(started: float) -> None:
    """Until the poller's first look for work is behind: after it, nothing but the
    re-read of the rows makes an idle worker claim. Not what the test waits for, only
    what keeps the poll from passing it for the re-read."""
    delay = started + FIRST_POLL + 0.2 - asyncio.get_running_loop().time()
    await asyncio.sleep(max(delay, 0.0))


class Ping(venturi.Task, kind="wfr.ping"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Gate(venturi.Task, kind="wfr.gate"):
    """Runs until the test opens the gate."""

    running: ClassVar[int] = 0
    gate: ClassVar[asyncio.Event]

    async def run(self, ctx: venturi.Context) -> None:
        Gate.running += 1
        try:
            await Gate.gate.wait()
        finally:
            Gate.running -= 1


@pytest.fixture
async def sql(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A session of the test's own: it changes a kind's row as an operator's SQL would,
    sending no control message (as if the message were lost)."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def _done(queue: Queue, kind: str, n: int) -> bool:
    return await queue.count(kind=kind, statuses=[Status.COMPLETED]) == n


async def test_a_resume_whose_message_was_lost_is_honoured_within_a_heartbeat_interval(
        pgq: Queue, sql: asyncpg.Connection) -> None:
    """Nothing wakes the idle worker but its own re-read of the rows: no message, no poll,
    no claim. Before, the re-read waited for the next claim, a poll interval away."""
    await pgq.pause(Ping.__task__.kind)
    await pgq.enqueue_many([Ping() for _ in range(3)])
    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=2,
                            heartbeat_interval=0.2, poll_interval=NEVER)
    started = asyncio.get_running_loop().time()
    async with running(worker):
        await past_the_first_poll(started)
        assert await pgq.count(kind="wfr.ping", statuses=[Status.PENDING]) == 3
        await sql.execute(f"UPDATE {pgq.prefix}kinds SET paused = false WHERE kind = $1",
                          "wfr.ping")
        await wait_for(lambda: _done(pgq, "wfr.ping", 3), timeout=5,
                       what="the resumed jobs, within a few heartbeat intervals")


async def test_a_raised_limit_whose_message_was_lost_is_honoured_within_a_heartbeat_interval(
        pgq: Queue, sql: asyncpg.Connection) -> None:
    """The limited claim came back short (blocked); the re-read that finds the limit
    raised wakes the claimer, which takes what the new limit allows."""
    Gate.running, Gate.gate = 0, asyncio.Event()
    await pgq.set_limits("wfr.gate", concurrency=1)
    await pgq.enqueue_many([Gate() for _ in range(4)])
    worker = venturi.Worker(pgq, tasks=[Gate], concurrency=4,
                            heartbeat_interval=0.2, poll_interval=NEVER)
    started = asyncio.get_running_loop().time()
    try:
        async with running(worker):
            await wait_for(lambda: Gate.running == 1, what="one gated run")
            await past_the_first_poll(started)
            await sql.execute(f"UPDATE {pgq.prefix}kinds SET concurrency = 3 WHERE kind = $1",
                              "wfr.gate")
            await wait_for(lambda: Gate.running == 3, timeout=5,
                           what="three gated runs, within a few heartbeat intervals")
            Gate.gate.set()
            await wait_for(lambda: _done(pgq, "wfr.gate", 4), what="the gated jobs")
    finally:
        Gate.gate.set()


async def test_a_pause_message_is_read_at_once_and_a_resume_wakes_the_claimer(
        pgq: Queue) -> None:
    """The control message path, with the heartbeat's re-read out of the way."""
    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=2,
                            heartbeat_interval=NEVER, poll_interval=NEVER)

    def paused_seen() -> bool:
        value = worker.metrics.registry.get_sample_value(
            "venturi_kind_limited_total", {"kind": "wfr.ping", "by": "paused"})
        return bool(value)

    async with running(worker):
        await pgq.pause("wfr.ping")
        await wait_for(paused_seen, timeout=5, what="the worker to read the pause")
        await pgq.enqueue_many([Ping() for _ in range(2)])
        assert await pgq.count(kind="wfr.ping", statuses=[Status.PENDING]) == 2
        await pgq.resume("wfr.ping")
        await wait_for(lambda: _done(pgq, "wfr.ping", 2), timeout=5, what="the resumed jobs")


async def test_a_claim_never_waits_for_a_re_read(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every re-read of the rows hangs (a slow database, say) from the moment the worker
    is ready: a job enqueued meanwhile is still picked up at once. Before, the claimer
    re-read the rows before its first claim after each heartbeat interval, and waited."""
    gate = asyncio.Event()
    hanging: list[object] = []
    real = pgq.store.kind_controls

    async def hangs(*args: Any, **kwargs: Any) -> Any:
        marker = object()
        hanging.append(marker)
        await gate.wait()
        hanging.remove(marker)
        return await real(*args, **kwargs)

    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=2,
                            heartbeat_interval=0.05, poll_interval=NEVER)
    try:
        async with running(worker):
            monkeypatch.setattr(pgq.store, "kind_controls", hangs)

            def one_hangs() -> bool:
                worker.wake()  # whoever re-reads (and a claim that would) gets there
                return bool(hanging)

            await wait_for(one_hangs, timeout=5, what="a re-read of the rows to hang")
            job = await pgq.enqueue(Ping())

            async def done() -> bool:
                row = await pgq.job(job.id)
                return row is not None and row.status is Status.COMPLETED

            await wait_for(done, timeout=5, what="the job, while the re-read hangs")
            assert hanging, "the re-read was meant to hang throughout"
    finally:
        gate.set()
