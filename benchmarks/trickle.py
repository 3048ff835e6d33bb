"""What an idle worker asks of the database per job, when jobs come one at a time.

``python -m benchmarks.trickle [--jobs 50] [--concurrency 10] [--gap 0.05] [--workers 1]
[--dsn DSN]`` starts ``--workers`` in-process workers with the library's defaults
(one queue: their calls are counted together), waits until they listen,
then enqueues ``--jobs`` no-op jobs one at a time, each after the last one ran and
``--gap`` seconds more, and counts the store calls the workers made meanwhile, per job
(claims, settles, the timer's ``next_visible_at``; the producer's enqueues are left
out). A job's least is one claim and one settle; docs/concepts/leases.md ("When a
worker claims") says which wake-ups claim. Counts, not times: the figure does not
depend on the machine's speed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os

import venturi
from venturi import Queue, Worker

from .harness import DEFAULT_DSN, fresh_prefix, watch_store_calls
from .scenarios.worker import quiet_logs, running

KIND = "bench.trickle"
RAN: list[asyncio.Event] = []
PRODUCER_CALLS = {"enqueue", "enqueue_plain", "enqueue_many", "job"}


class Tick(venturi.Task, kind=KIND):
    n: int

    async def run(self, ctx: venturi.Context) -> None:
        RAN[-1].set()


async def _main(args: argparse.Namespace) -> None:
    counts: collections.Counter[str] = collections.Counter()
    async with fresh_prefix(args.dsn) as prefix, Queue.connect(args.dsn, prefix=prefix) as q:
        watch_store_calls(q.store, lambda name: counts.update([name]))
        with quiet_logs():
            async with contextlib.AsyncExitStack() as workers:
                for _ in range(args.workers):
                    await workers.enter_async_context(
                        running(Worker(q, tasks=[Tick], concurrency=args.concurrency)))
                await asyncio.sleep(0.3)  # the claims the boot and LISTEN asked for
                counts.clear()
                for n in range(args.jobs):
                    RAN.append(asyncio.Event())
                    await q.enqueue(Tick(n=n))
                    await asyncio.wait_for(RAN[-1].wait(), 10)
                    await asyncio.sleep(args.gap)
                calls = {k: v for k, v in counts.items() if k not in PRODUCER_CALLS}
    per_job = ", ".join(f"{k} {v / args.jobs:.2f}" for k, v in sorted(calls.items()))
    print(f"{args.jobs} jobs, {args.workers} worker(s) of concurrency {args.concurrency}, "
          f"{args.gap * 1e3:.0f} ms apart: the workers' store calls per job: {per_job}; all told "
          f"{sum(calls.values()) / args.jobs:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--gap", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
