"""Where the slots scenario's time goes: one in-process worker, jobs that sleep.

``python -m benchmarks.slotstrace [--rounds 3] [--jobs 20000] [--concurrency 200]
[--sleep 0.02] [--gc-threshold N|off] [--dsn DSN]``: the ``slots`` scenario's drain
(benchmarks/scenarios/worker.py: N jobs that ``await asyncio.sleep(0.02)``, one
``Worker(concurrency=200)`` with the library's defaults, ``run(until_empty=True)``),
timed the same way (from ``Worker(...)`` to ``run()`` returning), with what the figure
alone does not say:

- **boot**: ``Worker(...)`` to the first handler's start;
- **sleep**: how long each handler's 20 ms sleep really took (mean, p50, p99): a sleep
  wakes late when the event loop is busy with other callbacks, or collecting garbage;
- **tail**: the last handler's end to ``run()`` returning (the last settlements, the
  final empty claim, the shutdown);
- **gaps**: per slot, a handler's end to the next handler's start on that slot: near
  zero while buffered jobs are waiting, longer when the slot waited for a claim's rows
  (how many took over 2 ms, their sum per slot, and how much of it fell in the first
  100 ms, while the prefetch window is still growing);
- **slot-busy**: the handlers' time (the sleeps as they took) over concurrency × the
  drain's time: the share of slot time spent inside a handler; the rest is boot, waits
  for claimed jobs, the last jobs' tail and the bookkeeping between runs;
- **gc**: the garbage collector's passes during the drain, by generation, with their
  total and longest time (``gc.callbacks``);
- **cpu**: the process's CPU time per job (user + system).

``--gc-threshold`` is passed to the worker (``off``: ``None``, the collector left as the
process has it; a tree from before the option ignores it). To compare two trees, run
each with ``PYTHONPATH=<tree>`` from a directory that has no ``venturi/`` of its own
(``python -m`` puts the current directory first on ``sys.path``). Nothing here is a
benchmark figure: the page's are in docs/benchmarks.md; this says what they are made of.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import statistics
import time
from collections import defaultdict
from typing import Any

import asyncpg

import venturi
from venturi import Queue, Worker, WorkerConfig

from .harness import DEFAULT_DSN, fresh_prefix, truncate
from .scenarios.worker import fill, quiet_logs

KIND = "bench.slotstrace"

SLEEP = [0.02]
STARTS: list[float] = []
ENDS: list[float] = []
SLOTS: list[int] = []  # the task each run ran in: a slot's
GCS: list[tuple[int, float]] = []
_gc_start = [0.0]


class Traced(venturi.Task, kind=KIND):
    """The scenario's sleepy job, timing its own sleep."""

    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        began = time.perf_counter()
        await asyncio.sleep(SLEEP[0])
        STARTS.append(began)
        ENDS.append(time.perf_counter())
        SLOTS.append(id(asyncio.current_task()))


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_start[0] = time.perf_counter()
    else:
        GCS.append((info["generation"], time.perf_counter() - _gc_start[0]))


def _report(jobs: int, concurrency: int, seconds: float, began: float, cpu: float) -> str:
    durations = sorted(e - s for s, e in zip(STARTS, ENDS, strict=True))

    def p(q: float) -> float:
        return durations[min(len(durations) - 1, int(len(durations) * q))] * 1e3

    runs: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for slot, start, end in zip(SLOTS, STARTS, ENDS, strict=True):
        runs[slot].append((start, end))
    first = min(STARTS)
    gaps = [(b[0] - a[1], a[1] - first < 0.1) for r in map(sorted, runs.values())
            for a, b in itertools.pairwise(r)]
    waited = sum(g for g, _ in gaps) / len(runs)
    ramp = sum(g for g, early in gaps if early) / len(runs)
    by_gen: dict[int, list[float]] = defaultdict(list)
    for generation, took in GCS:
        by_gen[generation].append(took)
    gcs = ", ".join(f"gen{g} {len(t)}× {sum(t) * 1e3:.0f} ms (max {max(t) * 1e3:.1f})"
                    for g, t in sorted(by_gen.items())) or "none"
    return (f"{jobs / seconds:,.0f} jobs/s ({jobs / seconds / (concurrency / SLEEP[0]):.0%} of "
            f"{concurrency} × 1/{SLEEP[0]:g} s) | boot {(min(STARTS) - began) * 1e3:.0f} ms | "
            f"sleep mean {statistics.mean(durations) * 1e3:.2f} ms, p50 {p(0.5):.2f}, "
            f"p99 {p(0.99):.2f} | tail {(began + seconds - max(ENDS)) * 1e3:.0f} ms | "
            f"gaps >2 ms {sum(g > 0.002 for g, _ in gaps)}, {waited * 1e3:.0f} ms per slot "
            f"({ramp * 1e3:.0f} in the first 100 ms) | "
            f"slot-busy {sum(durations) / (concurrency * seconds):.1%} | "
            f"gc {gcs} | cpu {cpu / jobs * 1e6:.0f} µs/job")


async def _main(args: argparse.Namespace) -> None:
    SLEEP[0] = args.sleep
    threshold = None if args.gc_threshold == "off" else int(args.gc_threshold)
    # A tree from before the option ran with the process's collector as it was.
    has_option = "gc_threshold" in WorkerConfig.__dataclass_fields__
    options: dict[str, Any] = {"gc_threshold": threshold} if has_option else {}
    gc.callbacks.append(_on_gc)
    async with fresh_prefix(args.dsn) as prefix, Queue.connect(args.dsn, prefix=prefix) as q:
        conn = await asyncpg.connect(args.dsn)
        try:
            for _ in range(args.rounds):
                STARTS.clear()
                SLOTS.clear()
                ENDS.clear()
                await truncate(conn, prefix)
                await fill(conn, prefix, args.jobs, KIND)
                GCS.clear()
                cpu = time.process_time()
                began = time.perf_counter()
                with quiet_logs():
                    await Worker(q, tasks=[Traced], concurrency=args.concurrency,
                                 **options).run(until_empty=True)
                seconds = time.perf_counter() - began
                print(_report(args.jobs, args.concurrency, seconds, began,
                              time.process_time() - cpu), flush=True)
        finally:
            await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=0.02)
    parser.add_argument("--gc-threshold", default="10000")
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
