"""Flow control with the worker in the loop (docs/concepts/flow-control.md): a limited
kind takes no slot it cannot use and other kinds keep flowing; a paused kind waits and
resumes through the control channel; a rate-limited kind waits for its window."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import ClassVar

import pytest

import venturi
from venturi import MemoryStore, Queue, Status
from venturi.store.base import ClaimRequest, LimitedClaim

from ..conftest import wait_for
from .conftest import running

pytestmark = pytest.mark.timeout(60)


class Gate(venturi.Task, kind="wf.gate", concurrency=2):
    """Runs until the test opens the gate; counts how many run at once."""

    running: ClassVar[int] = 0
    most: ClassVar[int] = 0
    gate: ClassVar[asyncio.Event | None] = None

    async def run(self, ctx: venturi.Context) -> None:
        cls = type(self)
        cls.running += 1
        cls.most = max(cls.most, cls.running)
        try:
            assert cls.gate is not None
            await cls.gate.wait()
        finally:
            cls.running -= 1


class Free(venturi.Task, kind="wf.free"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Other(venturi.Task, kind="wf.other"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Burst(venturi.Task, kind="wf.burst", rate="5/s"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


async def _count(queue: Queue, kind: str, status: Status) -> int:
    return await queue.count(kind=kind, statuses=[status])


@pytest.fixture
def mq() -> Queue:
    return Queue(MemoryStore())


async def test_a_limited_kind_takes_no_slot_it_cannot_use(mq: Queue) -> None:
    Gate.running = Gate.most = 0
    Gate.gate = asyncio.Event()
    await mq.enqueue_many([Gate() for _ in range(6)])
    await mq.enqueue_many([Free() for _ in range(30)])
    worker = venturi.Worker(mq, tasks=[Gate, Free], concurrency=4)
    async with running(worker):
        await wait_for(lambda: _count(mq, "wf.free", Status.COMPLETED), what="free jobs")
        await wait_for(lambda: _all_done(mq, "wf.free", 30), what="every free job")
        assert Gate.running == 2 and await _count(mq, "wf.gate", Status.PENDING) == 4
        Gate.gate.set()
        await wait_for(lambda: _all_done(mq, "wf.gate", 6), what="the gated jobs")
    assert Gate.most == 2
    samples = worker.metrics.registry.get_sample_value(
        "venturi_kind_limited_total", {"kind": "wf.gate", "by": "concurrency"})
    assert samples is not None and samples >= 1


async def test_pause_holds_a_kind_and_resume_restarts_it(mq: Queue) -> None:
    await mq.pause("wf.free")
    await mq.enqueue_many([Free() for _ in range(5)])
    worker = venturi.Worker(mq, tasks=[Free, Other], concurrency=4)
    async with running(worker):
        await mq.enqueue_many([Other() for _ in range(3)])
        await wait_for(lambda: _all_done(mq, "wf.other", 3), what="the other kind's jobs")
        assert await _count(mq, "wf.free", Status.PENDING) == 5
        assert [k.held for k in await mq.kinds() if k.kind == "wf.free"] == ["paused"]
        await mq.resume("wf.free")
        await wait_for(lambda: _all_done(mq, "wf.free", 5), what="the resumed jobs")


async def test_until_empty_returns_with_a_paused_kind_left_pending(mq: Queue) -> None:
    await mq.pause("wf.free")
    await mq.enqueue_many([Free() for _ in range(3)])
    await asyncio.wait_for(venturi.Worker(mq, tasks=[Free]).run(until_empty=True), 10)
    assert await _count(mq, "wf.free", Status.PENDING) == 3


async def test_a_rate_limited_kind_waits_for_its_window_without_polling(mq: Queue) -> None:
    await mq.enqueue_many([Burst() for _ in range(12)])
    loop = asyncio.get_running_loop()
    start = loop.time()
    worker = venturi.Worker(mq, tasks=[Burst], concurrency=10, poll_interval=dt.timedelta(
        seconds=60))
    await asyncio.wait_for(worker.run(until_empty=True), 20)
    elapsed = loop.time() - start
    assert await _count(mq, "wf.burst", Status.COMPLETED) == 12
    # 5, then 5 a second later, then 2: the timer fired at each window's end (polling
    # would have taken 60 s; the rest is the boot and the timer's lateness).
    assert 2.0 <= elapsed < 8.0, elapsed


async def test_operator_limits_reach_a_running_worker(mq: Queue) -> None:
    Gate.running = Gate.most = 0
    Gate.gate = asyncio.Event()
    await mq.set_limits("wf.gate", concurrency=1)
    await mq.enqueue_many([Gate() for _ in range(4)])
    worker = venturi.Worker(mq, tasks=[Gate], concurrency=4)
    async with running(worker):
        await wait_for(lambda: Gate.running == 1, what="one gated run")
        await mq.set_limits("wf.gate", concurrency=3)
        await wait_for(lambda: Gate.running == 3, what="three gated runs")
        Gate.gate.set()
        await wait_for(lambda: _all_done(mq, "wf.gate", 4), what="the gated jobs")
    assert Gate.most == 3


async def _all_done(queue: Queue, kind: str, n: int) -> bool:
    return await _count(queue, kind, Status.COMPLETED) == n


class One(venturi.Task, kind="wf.one", concurrency=1):
    """Runs until the test opens the gate."""

    gate: ClassVar[asyncio.Event | None] = None

    async def run(self, ctx: venturi.Context) -> None:
        assert One.gate is not None
        await One.gate.wait()


class HeldBackClaims(MemoryStore):
    """Once armed, the next limited claim reads the table at once and is answered only
    when the test says so: a claim whose round trip outlasts a settlement elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.holding = asyncio.Event()
        self.answer = asyncio.Event()

    async def claim_limited(self, request: ClaimRequest) -> LimitedClaim:
        got = await super().claim_limited(request)
        if self.armed:
            self.armed = False
            self.holding.set()
            await self.answer.wait()
        return got


async def test_a_wakeup_that_comes_while_a_limited_claim_is_out_is_not_lost() -> None:
    """The claim read the kind full (room 0); before it returned, the run holding the
    budget settled and announced it. The claim's short answer must not block the kind
    after that wake-up: nothing else would wake it (seen once as a flaky
    test_flow_refresh test, 2026-12-07)."""
    store = HeldBackClaims()
    queue = Queue(store)
    One.gate = asyncio.Event()
    await queue.enqueue(One())
    never = dt.timedelta(seconds=60)
    worker = venturi.Worker(queue, tasks=[One], concurrency=2, poll_interval=never,
                            heartbeat_interval=never)
    heard = asyncio.Event()
    woken = worker._flow.woken

    def announced(kind: str) -> None:
        woken(kind)
        heard.set()

    worker._flow.woken = announced  # type: ignore[method-assign]
    async with running(worker):
        await wait_for(lambda: _count(queue, "wf.one", Status.CLAIMED), what="the first run")
        store.armed = True
        await queue.enqueue(One())  # its wake-up sends a claim, which finds no room
        await wait_for(store.holding.is_set, what="the claim to be out")
        heard.clear()
        One.gate.set()  # the first run ends; its settlement frees the budget, announced
        await wait_for(heard.is_set, what="the announcement")
        store.answer.set()  # the claim comes back short
        await wait_for(lambda: _all_done(queue, "wf.one", 2), timeout=5,
                       what="the second job, claimed after the announcement")
