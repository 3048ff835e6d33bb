"""The tasks the benchmarks enqueue: a small, typical payload and no side effects."""

from __future__ import annotations

import time

import venturi

KIND = "bench.noop"
PROBE_KIND = "bench.probe"

# Probe handlers record when they started, by job number (same process and clock
# as the producer, which records when each enqueue committed).
STARTED: dict[int, float] = {}


class Noop(venturi.Task, kind=KIND):
    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Probe(venturi.Task, kind=PROBE_KIND):
    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        STARTED[self.n] = time.perf_counter()


def payload(n: int) -> dict[str, object]:
    """The payload of job ``n``, as the raw references receive it."""
    return {"n": n, "uri": f"s3://bench/objects/{n:08d}"}


def task(n: int) -> Noop:
    return Noop(n=n, uri=f"s3://bench/objects/{n:08d}")
