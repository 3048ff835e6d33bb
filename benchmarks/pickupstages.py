"""The worker's side of a pickup, step by step: what ``pickuptrace`` calls "notified →
claim sent" and "claim back → started", split further.

``python -m benchmarks.pickupstages [--n 500] [--dsn DSN]`` runs
``benchmarks.pickuptrace``'s protocol (its table is printed as well) with marks at each
step of venturi's path, in this order: the waker's job notice, the claimer awake (the
prefetch window asked), the window worked out, the store's claim called, the statement
sent (asyncpg's ``fetch``), its rows back, the job records built (``rows.job``), the
jobs dispatched to the buffer, the slot's executor started, the handler's context
built. Each step's time is reported at p50 and p90 over the pickups that went through
every step, and ``rows.job``'s own time beside what it takes in a loop on the same row
(``timeit``): after each idle spell the path runs with cold caches
(benchmarks/results-throughput.md, "Pickup: the worker's path runs cold").

The marks are wrappers set on this checkout's classes for the run (two
``perf_counter`` calls and a dict write per step); they add a few microseconds to the
steps they time. A diagnosis, not a benchmark figure.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import asyncpg

from venturi.store.postgres import rows, working
from venturi.worker import claimer, executor, prefetch, waker

from .harness import DEFAULT_DSN

STEPS = ("notice", "claimer awake", "window worked out", "store's claim called",
         "statement sent", "rows back", "records built", "dispatched", "executor started",
         "context built")


class Steps:
    """The marks of the pickup in flight, and every complete pickup's step times."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.times: dict[str, list[float]] = {}
        self.record_times: list[float] = []
        self.sample: Any = None  # a claimed row, for the loop timing

    def mark(self, step: str, after: str | None) -> None:
        """Mark ``step`` if the pickup has reached ``after`` and not this step yet."""
        if (after is None or after in self.at) and step not in self.at:
            self.at[step] = time.perf_counter()
            if step == STEPS[-1]:
                for a, b in itertools.pairwise(STEPS):
                    self.times.setdefault(f"{a} → {b}", []).append(self.at[b] - self.at[a])
                self.times.setdefault("all", []).append(self.at[step] - self.at[STEPS[0]])


def instrument(steps: Steps) -> list[Callable[[], None]]:
    """Wrap the path's steps; returns the undos."""
    undo: list[Callable[[], None]] = []

    def wrap(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        real = getattr(owner, name)
        setattr(owner, name, make(real))
        undo.append(lambda: setattr(owner, name, real))

    def notice(real: Any) -> Any:
        def on_notice(self: Any, payload: str) -> None:
            steps.at = {}
            steps.mark("notice", None)
            real(self, payload)
        return on_notice

    def window(real: Any) -> Any:
        def worked_out(self: Any, *args: Any) -> Any:
            steps.mark("claimer awake", "notice")
            result = real(self, *args)
            steps.mark("window worked out", "claimer awake")
            return result
        return worked_out

    def claim(real: Any) -> Any:
        async def claimed(self: Any, request: Any) -> Any:
            steps.mark("store's claim called", "window worked out")
            result = await real(self, request)
            if result:
                steps.mark("records built", "rows back")
            return result
        return claimed

    def fetch(real: Any) -> Any:
        async def fetched(self: Any, query: str, *args: Any, **kw: Any) -> Any:
            ours = "store's claim called" in steps.at and "statement sent" not in steps.at
            if ours:
                steps.mark("statement sent", "store's claim called")
            result = await real(self, query, *args, **kw)
            if ours and result:
                steps.mark("rows back", "statement sent")
                steps.sample = result[0]
            return result
        return fetched

    def job(real: Any) -> Any:
        def built(row: Any) -> Any:
            began = time.perf_counter()
            try:
                return real(row)
            finally:
                if "rows back" in steps.at and "records built" not in steps.at:
                    steps.record_times.append(time.perf_counter() - began)
        return built

    def dispatch(real: Any) -> Any:
        def dispatched(self: Any, jobs: Any) -> None:
            real(self, jobs)
            steps.mark("dispatched", "records built")
        return dispatched

    def execute(real: Any) -> Any:
        async def executed(self: Any, held: Any, run: Any = None) -> Any:
            steps.mark("executor started", "dispatched")
            return await real(self, held, run)
        return executed

    def context(real: Any) -> Any:
        def built(self: Any, *args: Any, **kw: Any) -> None:
            real(self, *args, **kw)
            steps.mark("context built", "executor started")
        return built

    wrap(waker.Waker, "_on_job_notice", notice)
    wrap(prefetch.Prefetch, "window", window)
    wrap(working.Working, "claim", claim)
    wrap(asyncpg.Connection, "fetch", fetch)
    wrap(rows, "job", job)
    wrap(claimer.Claimer, "_dispatch", dispatch)
    wrap(executor.Executor, "_execute", execute)
    wrap(executor.Context, "__init__", context)
    return undo


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def report(steps: Steps) -> str:
    lines = ["| step | pickups | p50 ms | p90 ms |", "|---|---:|---:|---:|"]
    for name, values in steps.times.items():
        lines.append(f"| {name} | {len(values)} | {_quantile(values, 0.5):.3f} | "
                     f"{_quantile(values, 0.9):.3f} |")
    if steps.record_times and steps.sample is not None:
        sample = steps.sample  # asked after the undo: the real rows.job, unwrapped
        loop = timeit.timeit(lambda: rows.job(sample), number=20_000) / 20_000
        lines.append("")
        lines.append(f"rows.job at a pickup: p50 {_quantile(steps.record_times, 0.5) * 1000:.1f}"
                     f" µs; in a loop on the same row: {loop * 1e6:.1f} µs")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500, help="pickups per contender")
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    args = parser.parse_args()
    from . import pickuptrace

    steps = Steps()
    undo = instrument(steps)
    try:
        sys.argv = [sys.argv[0], "--n", str(args.n), "--dsn", args.dsn]
        pickuptrace.main()
    finally:
        for step in reversed(undo):
            step()
    print()
    print(report(steps))


if __name__ == "__main__":
    main()
