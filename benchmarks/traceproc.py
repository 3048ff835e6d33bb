"""Enqueues in a process of its own, with tracing set up one way (:mod:`benchmarks.otel`).

``python -m benchmarks.traceproc MODE DSN PREFIX ONE BATCH BATCHES`` enqueues ONE
no-op jobs one ``Queue.enqueue`` at a time, then BATCHES ``enqueue_many`` calls of
BATCH jobs, and prints one JSON line: the seconds each part took. Nothing is traced
around the calls: with the SDK each enqueue is a root ``send`` span.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from venturi import Queue

from . import otel
from .tasks import task


async def main(mode: str, dsn: str, prefix: str, one: int, batch: int, batches: int) -> None:
    provider = otel.enable(mode)
    async with Queue.connect(dsn, prefix=prefix) as queue:
        await queue.enqueue(task(0))  # warm: the pool's connection, the statement cache
        start = time.perf_counter()
        for n in range(one):
            await queue.enqueue(task(n))
        one_seconds = time.perf_counter() - start
        items = [[task(b * batch + i) for i in range(batch)] for b in range(batches)]
        start = time.perf_counter()
        for jobs in items:
            await queue.enqueue_many(jobs)
        many_seconds = time.perf_counter() - start
    if provider is not None:
        provider.shutdown()
    print(json.dumps({"one": one_seconds, "many": many_seconds}), flush=True)


if __name__ == "__main__":
    mode, dsn, prefix, *sizes = sys.argv[1:]
    asyncio.run(main(mode, dsn, prefix, *map(int, sizes)))
