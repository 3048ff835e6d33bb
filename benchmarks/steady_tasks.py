"""The task of the steady-state benchmark (``benchmarks/steady.py``), run by real
``venturi worker --app benchmarks.steady_tasks`` processes.

Each job carries the wall-clock time its producer sent it (``at``); the handler
appends ``at`` and its own pickup lag (now - at, in ms) to a file of its process
under ``$VENTURI_STEADY_LAGS``, so the driver can read the lag of every job by
the time it was sent. Producer and workers share the machine and its clock.
Without the variable the handler records nothing.
"""

from __future__ import annotations

import atexit
import os
import time

import venturi

LAGS_DIR = "VENTURI_STEADY_LAGS"
KIND = "steady.tick"

_lines: list[str] = []
_last_flush = time.monotonic()


def _flush() -> None:
    global _last_flush
    directory = os.environ.get(LAGS_DIR)
    if directory and _lines:
        with open(os.path.join(directory, f"lags-{os.getpid()}.txt"), "a") as out:
            out.write("".join(_lines))
    _lines.clear()
    _last_flush = time.monotonic()


atexit.register(_flush)  # the CLI worker exits normally on SIGTERM


class Tick(venturi.Task, kind=KIND):
    n: int
    at: float  # time.time() when the producer sent the job

    async def run(self, ctx: venturi.Context) -> None:
        lag_ms = (time.time() - self.at) * 1000.0
        _lines.append(f"{self.at:.4f} {lag_ms:.3f}\n")
        # A write per second per process, not per job.
        if time.monotonic() - _last_flush >= 0.5:
            _flush()
