"""What limits that do not bind cost in CPU, whatever the machine's other load.

``python -m benchmarks.flow_cpu [--jobs N] [--rounds N]`` drains N no-op jobs (20,000) by
an in-process ``Worker(concurrency=10)``, three ways taking turns: a kind without
limits; a kind with limits configured but not binding (``concurrency=10000,
rate="1000000/s"``, the ``limits`` scenario's), its fast path planned once per
connection as the store runs it; and the same with the fast path planned at every call
(as before it was marked ``-- plan: cached``). It reports the whole machine's busy
CPU-seconds per drain (``/proc/stat``: the worker and the database server together, so
nothing else may run meanwhile: take the benchmark lock) beside the wall time. On a
saturated machine throughput goes as the inverse of CPU per job, which the wall-clock
ratio of ``python -m benchmarks run --only limits`` shows only through the noise of the
other load. Medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time

import asyncpg

from venturi import Queue, Task, Worker

from .harness import DEFAULT_DSN, fresh_prefix, truncate
from .scenarios.flow import LIMITED_KIND, LimitedNoop
from .scenarios.worker import fill, quiet_logs
from .tasks import KIND, Noop


def _busy_seconds() -> float:
    """CPU-seconds the machine has spent busy since boot (every CPU)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


async def main(dsn: str, jobs: int, rounds: int) -> None:
    async with contextlib.AsyncExitStack() as stack:
        contenders: dict[str, tuple[str, str, Queue, type[Task]]] = {}
        for name, kind, task in (("no limits", KIND, Noop),
                                 ("limits, fast path planned once", LIMITED_KIND, LimitedNoop),
                                 ("limits, fast path planned every call", LIMITED_KIND,
                                  LimitedNoop)):
            prefix = await stack.enter_async_context(fresh_prefix(dsn))
            queue = await stack.enter_async_context(Queue.connect(dsn, prefix=prefix))
            contenders[name] = (prefix, kind, queue, task)
        # Its own prefix, so its own Query objects: the others keep the marker.
        contenders["limits, fast path planned every call"][2].store._q[  # type: ignore[attr-defined]
            "claim_limited_fast"].cached_plan = False
        conn = await asyncpg.connect(dsn)
        stack.push_async_callback(conn.close)
        names = list(contenders)
        found: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        with quiet_logs():
            for run in range(rounds):
                for name in names[run % len(names):] + names[:run % len(names)]:
                    prefix, kind, queue, task = contenders[name]
                    await truncate(conn, prefix)
                    await conn.execute(f"TRUNCATE {prefix}kind_starts")
                    await fill(conn, prefix, jobs, kind)
                    await asyncio.sleep(0.3)  # let the fill's commit and the stats settle
                    cpu, start = _busy_seconds(), time.perf_counter()
                    await Worker(queue, tasks=[task], concurrency=10).run(until_empty=True)
                    found[name].append((_busy_seconds() - cpu, time.perf_counter() - start))
    base = statistics.median(c for c, _ in found[names[0]])
    print(f"{jobs:,} jobs, {rounds} rounds: machine CPU-seconds and wall seconds per drain")
    for name, runs in found.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        print(f"  {name:<38} CPU {cpu:5.2f} s ({1e6 * cpu / jobs:5.1f} µs/job, "
              f"{100 * base / cpu:3.0f} % of no limits' jobs per CPU-second), wall "
              f"{wall:5.2f} s ({jobs / wall:,.0f} jobs/s); CPU by round "
              f"{', '.join(f'{c:.2f}' for c, _ in runs)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    asyncio.run(main(args.dsn, args.jobs, args.rounds))
