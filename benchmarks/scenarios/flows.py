"""Results and workflows (docs/concepts/results.md, docs/concepts/workflows.md): how long
a fan-out + fan-in workflow takes to enqueue and to complete, and how soon
``Queue.result`` returns after the settle that completes its job commits."""

from __future__ import annotations

import asyncio
import time

import venturi
from venturi import Queue

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


@scenario("workflow", "fan-out + fan-in workflow: enqueue and completion")
async def workflow(bench: Bench) -> None:
    """A workflow of one step, N steps after it and one step after all of them (N = 1,000
    and 10,000 at full size, 100 and 1,000 quick): `enqueue_workflow` timed alone (one
    transaction, the steps in one statement), then one in-process `Worker` at
    concurrency 50 draining it (each middle step released by the root's settle, the
    join by the last middle step's), timed to `run(until_empty=True)` returning."""
    widths = (1_000, 10_000) if bench.size.name == "full" else (100, 1_000)
    for width in widths:
        enqueue_s, complete_s = [], []
        for _ in range(bench.size.runs):
            async with bench.fresh_prefix() as prefix, Queue.connect(
                    bench.dsn, prefix=prefix) as queue:
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
                assert state is not None and state.counts() == {"completed": width + 2}
        steps = width + 2
        bench.record(Figure(bench.scenario, f"enqueue_workflow, {width:,}-wide fan", steps,
                            enqueue_s, note="steps/s: the whole DAG in one transaction"))
        bench.record(Figure(bench.scenario, f"completion, {width:,}-wide fan", steps,
                            complete_s, note="steps/s: Worker concurrency=50, in-process"))


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
    bench.record(Figure(bench.scenario, "Queue.result wake-up after the settle", n, [seconds],
                        unit="ms", samples=samples,
                        note="from the handler's return to result() returning"))


__all__ = ["fan", "result_latency", "workflow"]
