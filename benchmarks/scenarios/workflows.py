"""Results and workflows (docs/concepts/results.md, docs/concepts/workflows.md): how long
a fan-out + fan-in workflow takes to enqueue and to complete, and how soon
``Queue.result`` returns after the settle that completes its job commits."""

from __future__ import annotations

import asyncio
import time

import asyncpg

import venturi
from venturi import Queue
from venturi._ids import uuid7

from ..harness import Bench, Figure, scenario
from .worker import quiet_logs


class FlowStep(venturi.Task, kind="bench.flow_step"):
    n: int = 0

    async def run(self, ctx: venturi.Context) -> None:
        ctx.set_result(self.n)


class Stamped(venturi.Task, kind="bench.stamped"):
    """Completes with the monotonic time just before its settle is written."""

    async def run(self, ctx: venturi.Context) -> None:
        ctx.set_result(time.monotonic())


def fan(width: int) -> venturi.Workflow:
    wf = venturi.Workflow(f"fan-{width}")
    root = wf.add(FlowStep(n=0), name="split")
    middle = [wf.add(FlowStep(n=i), after=[root]) for i in range(1, width + 1)]
    wf.add(FlowStep(n=-1), after=middle, name="join")
    return wf


async def raw_insert(dsn: str, prefix: str, n: int) -> float:
    """The raw reference: the same number of rows in one INSERT ... unnest (no edges)."""
    conn = await asyncpg.connect(dsn)
    try:
        ids = [uuid7() for _ in range(n)]
        started = time.perf_counter()
        await conn.execute(
            f"INSERT INTO {prefix}jobs (id, kind, payload) SELECT i, 'raw', '{{}}'::jsonb"
            " FROM unnest($1::uuid[]) AS i", ids)
        return time.perf_counter() - started
    finally:
        await conn.close()


@scenario("workflow", "fan-out + fan-in workflow: enqueue and completion")
async def workflow(bench: Bench) -> None:
    """A workflow of one step, N steps after it and one step after all of them (N = 1,000
    and 10,000 at full size, 100 and 1,000 quick): `enqueue_workflow` timed alone (one
    transaction, the steps in one statement), then one in-process `Worker` at
    concurrency 50 draining it (each middle step released by the root's settle, the
    join by the last middle step's), timed to `run(until_empty=True)` returning. The
    references: a raw INSERT ... unnest of as many rows, and the same Worker draining as
    many independent jobs (`enqueue_many`), in the same run."""
    widths = (1_000, 10_000) if bench.size.name == "full" else (100, 1_000)
    for width in widths:
        steps = width + 2
        enqueue_s, complete_s, raw_s, plain_s = [], [], [], []
        for _ in range(bench.size.runs):
            async with bench.fresh_prefix() as prefix, Queue.connect(
                    bench.dsn, prefix=prefix) as queue:
                raw_s.append(await raw_insert(bench.dsn, prefix, steps))
                await queue.enqueue_many([FlowStep(n=i) for i in range(steps)])
                started = time.perf_counter()
                with quiet_logs():
                    await venturi.Worker(queue, tasks=[FlowStep], concurrency=50).run(
                        until_empty=True)
                plain_s.append(time.perf_counter() - started)
                wf = fan(width)
                started = time.perf_counter()
                wf_id = await queue.enqueue_workflow(wf)
                enqueue_s.append(time.perf_counter() - started)
                started = time.perf_counter()
                with quiet_logs():
                    await venturi.Worker(queue, tasks=[FlowStep], concurrency=50).run(
                        until_empty=True)
                complete_s.append(time.perf_counter() - started)
                state = await queue.workflow(wf_id)
                assert state is not None and state.counts() == {"completed": steps}
        raw = f"raw INSERT ... unnest of {steps:,} rows"
        plain = f"Worker drain of {steps:,} independent jobs"
        bench.record(Figure(bench.scenario, raw, steps, raw_s, raw=True))
        bench.record(Figure(bench.scenario, plain, steps, plain_s, (raw,),
                            note="jobs/s: Worker concurrency=50, no dependencies"))
        bench.record(Figure(bench.scenario, f"enqueue_workflow, {width:,}-wide fan", steps,
                            enqueue_s, (raw,),
                            note="steps/s: the whole DAG in one transaction"))
        bench.record(Figure(bench.scenario, f"completion, {width:,}-wide fan", steps,
                            complete_s, (raw, plain),
                            note="steps/s: Worker concurrency=50, in-process"))


async def raw_notify_latency(dsn: str, n: int) -> list[float]:
    """The raw reference: a NOTIFY committed on one connection, received by a LISTEN on
    another (ms from before the statement to the callback)."""
    listener, sender = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    got: asyncio.Queue[float] = asyncio.Queue()
    try:
        await listener.add_listener("bench_raw_results",
                                    lambda *_: got.put_nowait(time.monotonic()))
        samples = []
        for _ in range(n):
            sent = time.monotonic()
            await sender.execute("SELECT pg_notify('bench_raw_results', 'x')")
            samples.append((await asyncio.wait_for(got.get(), 10) - sent) * 1000)
        return samples
    finally:
        await listener.close()
        await sender.close()


@scenario("result", "result() latency from the settle's commit")
async def result_latency(bench: Bench) -> None:
    """Jobs enqueued one at a time into an idle in-process worker (concurrency 10), each
    awaited with `Queue.result` from a waiter registered before the worker claims it;
    latency = the waiter's wake-up − the handler's last moment before its settle, same
    process and clock (so it includes the settle's round trip and its commit, the
    notification's delivery and the re-read of the row)."""
    n = bench.size.pickup
    async with bench.fresh_prefix() as prefix, Queue.connect(bench.dsn, prefix=prefix) as queue:
        worker = venturi.Worker(queue, tasks=[Stamped], concurrency=10)
        samples: list[float] = []
        started = time.perf_counter()
        with quiet_logs():
            running = asyncio.create_task(worker.run())
            try:
                for _ in range(n):
                    job = await queue.enqueue(Stamped())
                    stamp = await queue.result(job.id, timeout=30)
                    samples.append((time.monotonic() - stamp) * 1000)
            finally:
                await worker.drain()
                await running
        seconds = time.perf_counter() - started
    raw_samples = await raw_notify_latency(bench.dsn, n)
    raw = "raw NOTIFY -> LISTEN callback"
    bench.record(Figure(bench.scenario, raw, n, [sum(raw_samples) / 1000], raw=True,
                        unit="ms", samples=raw_samples))
    bench.record(Figure(bench.scenario, "Queue.result wake-up after the settle", n, [seconds],
                        (raw,), unit="ms", samples=samples,
                        note="from the handler's return to result() returning"))


__all__ = ["fan", "result_latency", "workflow"]
