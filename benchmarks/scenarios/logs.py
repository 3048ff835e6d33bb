"""What venturi's logging costs a drain: used as a library with nothing configured,
against the configuration ``venturi worker`` installs (docs/operations/logging.md).
The cost of one disabled event is ``python -m benchmarks.logcost``."""

from __future__ import annotations

import functools
import os
import statistics
import time
from pathlib import Path

import asyncpg

from ..harness import Bench, Figure, scenario
from ..tasks import KIND
from .worker import Child, take_turns

MODES = {"raw": "raw batched loop, 1 process",
         "worker": "Worker concurrency=50, no logging configured",
         "worker-cli-logs": "Worker concurrency=50, the CLI's logging (JSON, INFO)"}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drain_in_child(bench: Bench, mode: str, prefix: str,
                         cpu: dict[str, list[float]]) -> float:
    """One child process drains the table: its wall time from "go" to "done" (the
    figure), and its CPU time over the same span, appended to ``cpu[mode]``: on a
    shared machine the CPU a drain burns is steadier than its wall time."""
    child = await Child.start(mode, bench.dsn, prefix, 50)
    try:
        before, start = cpu_seconds(child.proc.pid), time.perf_counter()
        child.send("go")
        await child.done()
        seconds = time.perf_counter() - start
        cpu[mode].append(cpu_seconds(child.proc.pid) - before)
        return seconds
    finally:
        await child.close()


@scenario("logging", "worker drain: no logging configured vs the CLI's logging")
async def logging_cost(bench: Bench) -> None:
    """One worker process (`Worker(concurrency=50).run(until_empty=True)`) drains N
    no-op jobs (20,000 at full size) in a process that configures no logging, as an
    application embedding venturi may not (its loggers are then at Python's default,
    WARNING: the per-job DEBUG events are never built), and in one running under the
    logging configuration `venturi worker` installs (JSON lines at INFO, through the
    standard library's handlers), taking turns in the same runs; the raw batched loop
    in a process of its own is the reference. Timed by the parent from "go" to the
    child's return (processes started and connected beforehand); the notes give each
    drain's CPU time per job, read from /proc."""
    n = bench.size.drain
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    async with bench.fresh_prefix() as lp:
        conn = await asyncpg.connect(bench.dsn)
        try:
            secs = await take_turns(bench, conn, {
                mode: (lp, n, KIND, functools.partial(drain_in_child, bench, mode, lp, cpu))
                for mode in MODES
            })
        finally:
            await conn.close()

    def per_job(mode: str) -> str:
        return f"CPU {statistics.median(cpu[mode]) / n * 1e6:.1f} µs per job (median)"

    raw, library = MODES["raw"], MODES["worker"]
    bench.record(Figure(bench.scenario, raw, n, secs["raw"], raw=True, note=per_job("raw")))
    bench.record(Figure(bench.scenario, library, n, secs["worker"], (raw,),
                        note=f"venturi as a library, nothing configured; {per_job('worker')}"))
    bench.record(Figure(bench.scenario, MODES["worker-cli-logs"], n, secs["worker-cli-logs"],
                        (raw, library), note="venturi.logs.configure('json', 'info'), as "
                        f"venturi worker does; {per_job('worker-cli-logs')}"))
