"""What one of venturi's log calls costs, in nanoseconds (CPU only, no database).

``python -m benchmarks.logcost [--number N]``: the per-job event as the worker writes
it, ``log.debug("job_claimed", job_id=..., kind=..., run_no=...)``, with DEBUG
disabled, in a process that configures no logging (an application embedding venturi)
and under the configuration ``venturi worker`` installs (JSON at INFO); beside it the
floor (a no-op function taking the same arguments: the call and its keyword dict),
the level check the worker makes once per run, and for scale an enabled INFO event
rendered to JSON (written to /dev/null). Each figure is the best of several repeats,
the usual way to read a micro-benchmark on a shared machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import timeit
from collections.abc import Callable
from typing import Any

from venturi import logs

JOB_ID = "01a2265a-3d85-71b3-8454-588766b38915"


def _noop(event: str, **fields: Any) -> None:
    return None


def best_ns(fn: Callable[[], object], number: int, repeat: int = 7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def measure(number: int) -> dict[str, float]:
    log = logs.get_logger("venturi.worker")

    def debug() -> None:
        log.debug("job_claimed", job_id=JOB_ID, kind="bench.noop", run_no=1)

    def floor() -> None:
        _noop("job_claimed", job_id=JOB_ID, kind="bench.noop", run_no=1)

    def info() -> None:
        log.info("job_retried", job_id=JOB_ID, kind="bench.noop", run_no=1, retry_in=1.5)

    figures = {
        "no-op function, same arguments (the floor)": best_ns(floor, number),
        "disabled log.debug, nothing configured": best_ns(debug, number),
        "log.is_enabled_for(DEBUG), nothing configured":
            best_ns(lambda: log.is_enabled_for(logging.DEBUG), number),
    }
    with open(os.devnull, "w") as sink:
        logs.configure("json", "info", stream=sink)
        try:
            figures["disabled log.debug, the CLI's logging (JSON, INFO)"] = best_ns(debug, number)
            figures["enabled log.info rendered to JSON, the CLI's logging"] = best_ns(
                info, max(number // 100, 1))
        finally:
            logs.reset()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.logcost", description=__doc__)
    parser.add_argument("--number", type=int, default=200_000, help="calls per repeat")
    args = parser.parse_args(argv)
    for name, ns in measure(args.number).items():
        print(f"{name:<58} {ns:>9,.0f} ns")


if __name__ == "__main__":
    main()
