"""The tasks the benchmarks enqueue: a small, typical payload and no side effects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import venturi

KIND = "bench.noop"
PROBE_KIND = "bench.probe"
SLEEPY_KIND = "bench.sleepy"
SLEEP = 0.02  # seconds a Sleepy job waits


class Starts(dict[int, float]):
    """Start times by job number, and a wait for one to come in (no polling: a poll
    loop's own wake-ups would land in the timings it waits for)."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: dict[int, asyncio.Event] = {}

    def __setitem__(self, n: int, at: float) -> None:
        super().__setitem__(n, at)
        waiting = self._waiting.pop(n, None)
        if waiting is not None:
            waiting.set()

    async def wait(self, n: int, seconds: float, what: str) -> None:
        if n in self:
            return
        arrived = self._waiting[n] = asyncio.Event()
        try:
            await asyncio.wait_for(arrived.wait(), seconds)
        except TimeoutError:
            raise RuntimeError(f"timed out waiting for {what}") from None
        finally:
            self._waiting.pop(n, None)


# Probe handlers record when they started, by job number (perf_counter: CLOCK_MONOTONIC,
# the same clock in every process of the host, so a worker process's start times compare
# with the producer's commit times). A worker process also reports each start to the
# parent through ``REPORT``.
STARTED = Starts()
REPORT: Callable[[int, float], None] | None = None


class Noop(venturi.Task, kind=KIND):
    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Probe(venturi.Task, kind=PROBE_KIND):
    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        STARTED[self.n] = now = time.perf_counter()
        if REPORT is not None:
            REPORT(self.n, now)


class Sleepy(venturi.Task, kind=SLEEPY_KIND):
    """Waits 20 ms, as a call to another service would: 200 slots can run 10,000 a second."""

    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        await asyncio.sleep(SLEEP)


def payload(n: int) -> dict[str, object]:
    """The payload of job ``n``, as the raw references receive it."""
    return {"n": n, "uri": f"s3://bench/objects/{n:08d}"}


def task(n: int) -> Noop:
    return Noop(n=n, uri=f"s3://bench/objects/{n:08d}")
