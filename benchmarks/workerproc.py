"""A drain in a process of its own, for the scenarios that need one (memory, scale-out).

``python -m benchmarks.workerproc MODE DSN PREFIX CONCURRENCY``, MODE ``worker``
(a venturi ``Worker`` with the no-op task, ``run(until_empty=True)``, in a process
that configures no logging, as an application embedding venturi may not),
``worker-cli-logs`` (the same under the logging configuration ``venturi worker``
installs: JSON at INFO, here on stderr), ``worker-otel-api`` / ``worker-otel-sdk``
(the worker with tracing set up so, :mod:`benchmarks.otel`), ``worker-sleepy`` (jobs
that wait 20 ms), ``worker-probe`` and ``raw-probe`` (the pickup probes, below) or
``raw`` (the batched raw loop of :mod:`benchmarks.scenarios.worker`). Every worker
runs with the library's defaults but for the concurrency. Talks to the parent over
stdin/stdout, one line at a time, so the parent's clock and its /proc samples bracket
exactly the drain:

- the child connects and prints ``ready``;
- the parent writes ``go``; the child drains and prints ``done {json}``;
- the parent takes its last sample and writes ``exit``.

``worker-probe`` runs an idle worker instead: it prints ``ready`` once the worker
LISTENs, then ``started N T`` as each probe job N starts (T its ``perf_counter``),
and drains on ``exit``; ``raw-probe`` does the same with the raw LISTEN + claim loop
(:class:`benchmarks.raw.RawConsumer`), PREFIX its table's.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from venturi import Queue, Worker, logs

from . import otel, tasks
from .raw import RawConsumer, raw_drain
from .tasks import Noop, Probe, Sleepy


async def _line() -> str:
    line: str = await asyncio.to_thread(sys.stdin.readline)
    return line.strip()


async def main(mode: str, dsn: str, prefix: str, concurrency: int) -> None:
    # Logs go to stderr (with nothing configured, warnings only): stdout carries the
    # protocol.
    if mode == "worker-cli-logs":
        logs.configure("json", "info", stream=sys.stderr)
    provider = otel.enable(mode.removeprefix("worker-otel-")) if "-otel-" in mode else None
    async with Queue.connect(dsn, prefix=prefix) as queue:
        if mode == "worker-probe":
            await probe(Worker(queue, tasks=[Probe], concurrency=concurrency))
            return
        if mode == "raw-probe":
            await raw_probe(dsn, prefix)
            return
        task = Sleepy if mode == "worker-sleepy" else Noop
        worker = None if mode == "raw" else Worker(queue, tasks=[task],
                                                   concurrency=concurrency, **prefetch())
        print("ready", flush=True)
        if await _line() != "go":
            return
        start = time.perf_counter()
        if worker is not None:
            await worker.run(until_empty=True)
        else:
            await raw_drain(dsn, prefix, 100)
        seconds = time.perf_counter() - start
        print("done " + json.dumps({"seconds": seconds}), flush=True)
        await _line()
    if provider is not None:
        provider.shutdown()  # after "done": the export thread's last batch is not timed


def prefetch() -> dict[str, int]:
    """The defaults, unless ``VENTURI_BENCH_PREFETCH`` fixes the window (for comparisons
    by hand; no scenario sets it)."""
    value = os.environ.get("VENTURI_BENCH_PREFETCH")
    return {} if value is None else {"prefetch": int(value)}


async def probe(worker: Worker) -> None:
    """An idle worker reporting each probe's start, until the parent says ``exit``."""
    tasks.REPORT = lambda n, t: print(f"started {n} {t!r}", flush=True)
    run = asyncio.create_task(worker.run())
    while not worker.health.ready:
        if run.done():
            run.result()
        await asyncio.sleep(0.005)
    print("ready", flush=True)
    await _line()
    await worker.drain(grace=5)
    await run


async def raw_probe(dsn: str, prefix: str) -> None:
    """The pickup scenario's raw LISTEN + claim loop, reporting as ``worker-probe`` does."""
    def started(payload: dict[str, int]) -> None:
        print(f"started {payload['n']} {time.perf_counter()!r}", flush=True)

    async with RawConsumer(dsn, prefix, started):
        print("ready", flush=True)
        await _line()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
