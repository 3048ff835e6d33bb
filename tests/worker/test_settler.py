"""The settler's batches (venturi/worker/settler.py): a small batch waits for others to
share its commit while runs end fast, for no longer than the last write took and at
most GATHER_MAX; one of slow runs, or with no run left to end, is written at once. A
store stand-in records the batches and a sleep stand-in stands for the wait, so nothing
here depends on timing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from venturi._ids import uuid7
from venturi.errors import DatabaseConflict
from venturi.store.base import Action, Settled, Settlement
from venturi.worker.health import DatabaseHealth, Health
from venturi.worker.identity import Identity
from venturi.worker.settler import CONFLICT_ATTEMPTS, GATHER_MAX, Settler


class Recorder:
    """settle_many as a store does it, each write taking ``took`` of the test's clock."""

    def __init__(self, clock: list[float], took: float) -> None:
        self.batches: list[list[Settlement]] = []
        self.started: asyncio.Queue[None] = asyncio.Queue()  # one item per write sent
        self.release = asyncio.Event()  # the test lets the write return
        self._clock = clock
        self._took = took

    async def settle_many(self, claimed_by: str,
                          settlements: Sequence[Settlement]) -> list[Settled]:
        self.batches.append(list(settlements))
        self.started.put_nowait(None)
        await self.release.wait()
        self.release.clear()
        self._clock[0] += self._took
        return [Settled(s.id, True) for s in settlements]


def one() -> Settlement:
    return Settlement(uuid7(), 1, Action.COMPLETE)


def settler(store: Any, clock: list[float], rate: float,
            active: int = 100) -> tuple[Settler, list[float]]:
    """``active``: the held jobs still to end (running or buffered)."""
    db = DatabaseHealth(Health(), Counter("t_db_unavailable", "", registry=CollectorRegistry()),
                        5.0)
    s = Settler(store, Identity("t"), db, lambda batch, results: None, lambda x: None,
                lambda: None, lambda: rate, lambda: active)
    s._clock = lambda: clock[0]
    slept: list[float] = []

    async def gather_sleep(seconds: float) -> None:  # the wait, recorded instead
        slept.append(seconds)

    s._sleep = gather_sleep
    return s, slept


async def two_writes(store: Recorder, s: Settler, more: int = 1) -> list[Settlement]:
    """One settlement, and ``more`` put while the first one's write is out; returns them
    once both writes have committed."""
    first, *rest = [one() for _ in range(1 + more)]
    task = asyncio.create_task(s.run())
    try:
        async with asyncio.timeout(5):
            s.put(first)
            await store.started.get()  # the first write waits for nothing
            for settlement in rest:
                s.put(settlement)
            store.release.set()
            await store.started.get()
            store.release.set()
            await s.wait_empty()
    finally:
        task.cancel()
    return [first, *rest]


async def test_a_small_batch_waits_for_more_while_runs_end_fast() -> None:
    clock = [0.0]
    store = Recorder(clock, took=0.010)  # every write takes 10 ms
    s, slept = settler(store, clock, rate=5_000.0)
    late = one()

    async def gather_sleep(seconds: float) -> None:
        slept.append(seconds)
        s.put(late)  # a run that ended during the wait

    s._sleep = gather_sleep
    first, second = await two_writes(store, s)
    assert [[x.id for x in b] for b in store.batches] == [[first.id], [second.id, late.id]]
    assert slept == [GATHER_MAX]  # the last write took 10 ms: the wait is capped


async def test_the_wait_is_no_longer_than_the_last_write() -> None:
    clock = [0.0]
    store = Recorder(clock, took=0.001)
    s, slept = settler(store, clock, rate=5_000.0)
    await two_writes(store, s)
    assert slept == [0.001]


async def test_slow_runs_are_settled_at_once() -> None:
    """At 10 runs a second, a 10 ms wait would collect a tenth of a settlement: none."""
    clock = [0.0]
    store = Recorder(clock, took=0.010)
    s, slept = settler(store, clock, rate=10.0)
    await two_writes(store, s)
    assert slept == [] and [len(b) for b in store.batches] == [1, 1]


async def test_with_no_run_left_to_end_the_batch_is_written_at_once() -> None:
    """The last runs of a burst: the rate is still high, but nothing running or buffered
    can join the batch, so waiting would only delay its commit (and result())."""
    clock = [0.0]
    store = Recorder(clock, took=0.010)
    s, slept = settler(store, clock, rate=5_000.0, active=0)
    await two_writes(store, s)
    assert slept == [] and [len(b) for b in store.batches] == [1, 1]


async def test_the_wait_expects_no_more_than_the_runs_left() -> None:
    """Two settlements buffered, one run left: the wait could not double the batch."""
    clock = [0.0]
    store = Recorder(clock, took=0.010)
    s, slept = settler(store, clock, rate=5_000.0, active=1)
    await two_writes(store, s, more=2)  # two wait while the first write is out
    assert slept == [] and [len(b) for b in store.batches] == [1, 2]


class Loses(Recorder):
    """A store whose first ``losses`` writes lose a race (rolled back whole)."""

    def __init__(self, clock: list[float], losses: int) -> None:
        super().__init__(clock, took=0.001)
        self.losses = losses
        self.release.set()

    async def settle_many(self, claimed_by: str,
                          settlements: Sequence[Settlement]) -> list[Settled]:
        self.batches.append(list(settlements))
        if self.losses:
            self.losses -= 1
            raise DatabaseConflict("database conflict 40P01: deadlock detected (injected)")
        return [Settled(s.id, True) for s in settlements]


async def _settle(store: Loses, batch: list[Settlement]) -> None:
    clock = [0.0]
    s, _ = settler(store, clock, rate=0.0)
    task = asyncio.create_task(s.run())
    try:
        async with asyncio.timeout(5):
            for settlement in batch:
                s.put(settlement)
            await s.wait_empty()
    finally:
        task.cancel()


async def test_a_batch_that_loses_a_race_is_sent_again_whole() -> None:
    """A deadlock rolls the batch back whole; the next try usually goes through. One
    round trip for the batch again, not one per settlement."""
    batch = [one() for _ in range(3)]
    store = Loses([0.0], losses=CONFLICT_ATTEMPTS - 1)
    await _settle(store, batch)
    assert [[x.id for x in b] for b in store.batches] == [[x.id for x in batch]] * CONFLICT_ATTEMPTS


async def test_a_batch_that_keeps_losing_is_split() -> None:
    """Losing every try of the batch: each settlement then goes on its own, so one that
    cannot be written does not hold back the others; the first one alone loses once more
    and is tried again."""
    a, b, c = batch = [one() for _ in range(3)]
    store = Loses([0.0], losses=CONFLICT_ATTEMPTS + 1)
    await _settle(store, batch)
    whole = [[x.id for x in batch]] * CONFLICT_ATTEMPTS
    written = [[x.id for x in w] for w in store.batches]
    assert written == [*whole, [a.id], [a.id], [b.id], [c.id]]
