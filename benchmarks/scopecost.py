"""What the cancel scope around one run costs: anyio's ``CancelScope`` against venturi's
``RunScope`` (venturi/worker/runscope.py).

``python -m benchmarks.scopecost [--rounds 5] [--runs 100000]`` enters and leaves each
scope ``--runs`` times inside one task, as the executor does once per run, the two
taking turns within each round, and prints the microseconds per enter and exit of each
round and their medians (benchmarks/results-throughput.md, "The run's cancel scope").
One process, one core, no database: the machine's speed drifts between whole drains by
more than the difference, which this isolates. A diagnosis, not a benchmark figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import anyio

from venturi.worker.runscope import RunScope


def _per_run(scope: Callable[[], AbstractContextManager[Any]], runs: int) -> float:
    began = time.perf_counter()
    for _ in range(runs):
        with scope():
            pass
    return (time.perf_counter() - began) / runs * 1e6


async def measure(rounds: int, runs: int) -> dict[str, list[float]]:
    anyio_scope = type(anyio.CancelScope())  # the backend's class, as the executor took it
    scopes: dict[str, Callable[[], AbstractContextManager[Any]]] = {
        "anyio CancelScope": anyio_scope, "RunScope": RunScope}
    times: dict[str, list[float]] = {name: [] for name in scopes}
    for r in range(rounds):
        order = list(scopes) if r % 2 == 0 else list(reversed(scopes))
        for name in order:
            times[name].append(_per_run(scopes[name], runs))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=100_000)
    args = parser.parse_args()
    times = asyncio.run(measure(args.rounds, args.runs))
    for name, per_run in times.items():
        rounds = ", ".join(f"{t:.2f}" for t in per_run)
        print(f"{name:>17}: median {statistics.median(per_run):.2f} µs per run ({rounds})")


if __name__ == "__main__":
    main()
