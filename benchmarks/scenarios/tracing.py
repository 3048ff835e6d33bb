"""What tracing costs (docs/operations/tracing.md): the drain and the enqueues with
OpenTelemetry absent, imported with no provider, and on (the SDK, a batch span
processor, an exporter that drops every span)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import statistics
import sys

import asyncpg

from ..harness import Bench, Figure, scenario, truncate
from ..tasks import KIND
from .logs import drain_in_child
from .worker import ROOT, take_turns

DRAIN_MODES = {"worker": "Worker concurrency=50, OpenTelemetry not imported",
               "worker-otel-api": "Worker concurrency=50, OpenTelemetry API, no provider",
               "worker-otel-sdk": "Worker concurrency=50, OpenTelemetry SDK on"}
ENQUEUE_MODES = {"off": "OpenTelemetry not imported", "api": "OpenTelemetry API, no provider",
                 "sdk": "OpenTelemetry SDK on"}
# What a traced producer stored: every drained job has a creation context to link to.
CONTEXT = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'


@scenario("tracing", "worker drain: OpenTelemetry absent, without a provider, and on")
async def tracing_drain(bench: Bench) -> None:
    """One worker process (`Worker(concurrency=50).run(until_empty=True)`) drains N
    no-op jobs (20,000 at full size), each stored with a producer's trace context, in a
    process that never imports OpenTelemetry, one that imports its API but sets no
    tracer provider, and one with the SDK's provider (a `process` span per run, linked
    to the job's context; a batch span processor; an exporter that drops the spans),
    taking turns in the same runs. Timed by the parent from "go" to the child's return
    (processes started and connected beforehand); the notes give the CPU per job."""
    n = bench.size.drain
    cpu: dict[str, list[float]] = {mode: [] for mode in DRAIN_MODES}
    async with bench.fresh_prefix() as tp:
        conn = await asyncpg.connect(bench.dsn)

        async def drain(mode: str) -> float:
            # Before the child starts, untimed: the same rows for every mode.
            await conn.execute(f"UPDATE {tp}jobs SET trace_context = $1::text::jsonb", CONTEXT)
            await conn.execute(f"VACUUM {tp}jobs")
            return await drain_in_child(bench, mode, tp, cpu)
        try:
            secs = await take_turns(bench, conn, {
                mode: (tp, n, KIND, functools.partial(drain, mode)) for mode in DRAIN_MODES})
        finally:
            await conn.close()

    def per_job(mode: str) -> str:
        return f"CPU {statistics.median(cpu[mode]) / n * 1e6:.1f} µs per job (median)"

    off = DRAIN_MODES["worker"]
    bench.record(Figure(bench.scenario, off, n, secs["worker"], raw=True, note=per_job("worker")))
    for mode in ("worker-otel-api", "worker-otel-sdk"):
        bench.record(Figure(bench.scenario, DRAIN_MODES[mode], n, secs[mode], (off,),
                            note=per_job(mode)))


async def enqueue_in_child(bench: Bench, mode: str, prefix: str) -> dict[str, float]:
    size = bench.size
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.traceproc", mode, bench.dsn, prefix,
        str(size.one_by_one), str(size.batch), str(size.batches),
        stdout=asyncio.subprocess.PIPE, cwd=ROOT, env=env)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"traceproc {mode} exited with {proc.returncode}")
    result: dict[str, float] = json.loads(out.decode().splitlines()[-1])
    return result


@scenario("tracing-enqueue", "enqueue and enqueue_many: OpenTelemetry absent, without a "
          "provider, and on")
async def tracing_enqueue(bench: Bench) -> None:
    """`Queue.enqueue` one job at a time (N jobs, 5,000 at full size) and `enqueue_many`
    in batches of 1,000 (20 batches at full size), each in a process of its own that
    never imports OpenTelemetry, imports its API with no provider, or sets the SDK's
    provider (one `send` span per call, its context stored with every job; batch span
    processor, spans dropped). The modes take turns in each run, on an emptied table."""
    size = bench.size
    one: dict[str, list[float]] = {m: [] for m in ENQUEUE_MODES}
    many: dict[str, list[float]] = {m: [] for m in ENQUEUE_MODES}
    modes = list(ENQUEUE_MODES)
    async with bench.fresh_prefix() as tp:
        conn = await asyncpg.connect(bench.dsn)
        try:
            for run in range(size.runs):
                for mode in modes[run % len(modes):] + modes[:run % len(modes)]:
                    await truncate(conn, tp)
                    result = await enqueue_in_child(bench, mode, tp)
                    one[mode].append(result["one"])
                    many[mode].append(result["many"])
        finally:
            await conn.close()
    for label, seconds, jobs in (("enqueue", one, size.one_by_one),
                                 (f"enqueue_many ×{size.batch}", many, size.batch * size.batches)):
        off = f"{label}, {ENQUEUE_MODES['off']}"
        bench.record(Figure(bench.scenario, off, jobs, seconds["off"], raw=True))
        for mode in ("api", "sdk"):
            bench.record(Figure(bench.scenario, f"{label}, {ENQUEUE_MODES[mode]}", jobs,
                                seconds[mode], (off,)))
