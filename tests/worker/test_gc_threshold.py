"""The garbage collector's young threshold while a worker runs (venturi/worker/gcpolicy.py)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

import venturi
from venturi import ConfigError, MemoryStore, Queue, Worker, WorkerConfig
from venturi.worker.gcpolicy import young_threshold

SEEN: list[int] = []


class Looks(venturi.Task, kind="gc.looks"):
    async def run(self, ctx: venturi.Context) -> None:
        SEEN.append(gc.get_threshold()[0])


@pytest.fixture(autouse=True)
def process_thresholds() -> Iterator[tuple[int, int, int]]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*saved)


async def test_a_running_worker_raises_the_threshold_and_puts_it_back() -> None:
    SEEN.clear()
    queue = Queue(MemoryStore())
    await queue.enqueue(Looks())
    await Worker(queue, tasks=[Looks]).run(until_empty=True)
    assert SEEN == [10_000]
    assert gc.get_threshold() == (700, 10, 10)


async def test_gc_threshold_none_leaves_the_collector_alone() -> None:
    SEEN.clear()
    queue = Queue(MemoryStore())
    await queue.enqueue(Looks())
    await Worker(queue, tasks=[Looks], gc_threshold=None).run(until_empty=True)
    assert SEEN == [700]


def test_nested_holders_restore_after_the_last() -> None:
    with young_threshold(5000):
        assert gc.get_threshold() == (5000, 10, 10)
        with young_threshold(20_000):  # the first holder's value stands
            assert gc.get_threshold()[0] == 5000
        assert gc.get_threshold()[0] == 5000
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_or_a_disabled_collector_is_left_as_it_is() -> None:
    gc.set_threshold(50_000, 20, 20)
    with young_threshold(10_000):
        assert gc.get_threshold() == (50_000, 20, 20)
    assert gc.get_threshold() == (50_000, 20, 20)
    gc.disable()
    try:
        gc.set_threshold(700, 10, 10)
        with young_threshold(10_000):
            assert gc.get_threshold()[0] == 700
    finally:
        gc.enable()


def test_a_change_made_while_held_is_not_undone() -> None:
    with young_threshold(10_000):
        gc.set_threshold(3000, 5, 5)  # the application's own choice, made meanwhile
    assert gc.get_threshold() == (3000, 5, 5)


async def test_two_workers_overlapping_restore_after_both() -> None:
    gate = asyncio.Event()

    class Waits(venturi.Task, kind="gc.waits"):
        async def run(self, ctx: venturi.Context) -> None:
            await gate.wait()

    first, second = Queue(MemoryStore()), Queue(MemoryStore())
    await first.enqueue(Waits())
    a = asyncio.create_task(Worker(first, tasks=[Waits]).run(until_empty=True))
    b = asyncio.create_task(Worker(second, tasks=[Looks]).run(until_empty=True))
    await b  # the second stops first, with the first still running
    assert gc.get_threshold()[0] == 10_000
    gate.set()
    await a
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("bad", [0, -1, 10_000_001, 1.5, True, "10000"])
def test_bad_gc_threshold_is_refused_with_its_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="gc_threshold"):
        WorkerConfig(gc_threshold=bad)  # type: ignore[arg-type]


def test_workers_in_threads_of_their_own_restore_after_the_last() -> None:
    """Start and stop counted under a lock: eight threads, each an event loop and a
    worker, holding the threshold in overlapping spans."""
    import threading

    barrier = threading.Barrier(8)
    seen: list[int] = []

    class Meets(venturi.Task, kind="gc.meets"):
        async def run(self, ctx: venturi.Context) -> None:
            await asyncio.to_thread(barrier.wait, 10)  # all eight running at once
            seen.append(gc.get_threshold()[0])

    def one() -> None:
        async def go() -> None:
            queue = Queue(MemoryStore())
            await queue.enqueue(Meets())
            await Worker(queue, tasks=[Meets]).run(until_empty=True)
        asyncio.run(go())

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == [10_000] * 8
    assert gc.get_threshold() == (700, 10, 10)
