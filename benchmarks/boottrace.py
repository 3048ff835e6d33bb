"""A worker's boot, step by step: from ``Worker(...)`` to its first handler.

``python -m benchmarks.boottrace [--rounds 4] [--jobs 4000] [--concurrency 200] [--window 60]
[--dsn DSN]``
fills a fresh prefix with ``--jobs`` jobs that ``await asyncio.sleep(0.02)``, then runs
one in-process ``Worker(concurrency=...)`` with the library's defaults,
``run(until_empty=True)``, ``--rounds`` times on the same ``Queue`` (the first round
opens the pool's connections; the later ones are warm). Each round prints, in ms from
``Worker(...)``: the boot's start and end (name lock, recovery, clock, kinds), every
store call begun and ended in the first ``--window`` ms (``name>`` and ``<name``), the first claim
sent and its rows back, and the first handler's start (benchmarks/results-throughput.md,
"Boot: the claim goes out before the slots are made"). The marks are wrappers set on
this checkout's classes for the run. A diagnosis, not a benchmark figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from contextlib import AsyncExitStack
from typing import Any

import asyncpg

import venturi
from venturi import Queue, Worker
from venturi.store.base import JobRecord
from venturi.worker import claimer, worker

from .harness import DEFAULT_DSN, fresh_prefix, truncate, watch_store_calls
from .scenarios.worker import fill, quiet_logs

KIND = "bench.boottrace"
MARKS: list[tuple[float, str]] = []


def mark(what: str) -> None:
    MARKS.append((time.perf_counter(), what))


class Sleepy(venturi.Task, kind=KIND):
    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        if not any(what == "first handler" for _, what in MARKS):
            mark("first handler")
        await asyncio.sleep(0.02)


def _install() -> None:
    """Marks around the boot and each claim (this process's classes, for the run)."""
    boot, claim = worker.Worker._boot, claimer.Claimer._claim

    async def marked_boot(self: worker.Worker, stack: AsyncExitStack) -> Any:
        mark("boot start")
        try:
            return await boot(self, stack)
        finally:
            mark("boot end")

    async def marked_claim(self: claimer.Claimer, free: int) -> tuple[list[JobRecord], bool]:
        mark(f"claim sent ({free})")
        got = await claim(self, free)
        mark(f"claim rows ({len(got[0])})")
        return got

    worker.Worker._boot = marked_boot  # type: ignore[method-assign]
    claimer.Claimer._claim = marked_claim  # type: ignore[method-assign]


async def _main(args: argparse.Namespace) -> None:
    _install()
    async with fresh_prefix(args.dsn) as prefix, Queue.connect(args.dsn, prefix=prefix) as q:
        watch_store_calls(q.store, lambda name: mark(f"{name}>"),
                          lambda name: mark(f"<{name}"))
        conn = await asyncpg.connect(args.dsn)
        try:
            for round_no in range(args.rounds):
                await truncate(conn, prefix)
                await fill(conn, prefix, args.jobs, KIND)
                MARKS.clear()
                began = time.perf_counter()
                with quiet_logs():
                    await Worker(q, tasks=[Sleepy], concurrency=args.concurrency
                                 ).run(until_empty=True)
                shown = [f"{what} {(at - began) * 1e3:.1f}" for at, what in MARKS
                         if at - began < args.window / 1e3]
                print(f"round {round_no}: " + " | ".join(shown), flush=True)
        finally:
            await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--window", type=float, default=60.0, help="ms of each boot shown")
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
