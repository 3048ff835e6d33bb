"""The connections a worker opens, and what asyncio reports as never retrieved.

``python -m benchmarks.connprobe [--processes 15] [--jobs 0] [--dsn DSN]`` runs
``--processes`` fresh Python processes, each draining ``--jobs`` no-op jobs (0: an empty
table) with ``Worker(concurrency=25).run(until_empty=True)`` and the library's
defaults, and prints per process the connections ``venturi.store._connect.connect``
opened during the run, by caller (the frames of venturi's code above it), and whether
asyncio printed "Future exception was never retrieved" on the way out. Run it with
``PYTHONPATH=<tree>`` to compare trees (benchmarks/results-throughput.md, "A connection
attempt its caller abandons", "The boot's vacuum look"). A diagnosis, not a benchmark
figure.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import traceback
from typing import Any

from .harness import DEFAULT_DSN

NEVER_RETRIEVED = "Future exception was never retrieved"


async def _child(dsn: str, jobs: int) -> None:
    from venturi import Queue, Worker
    from venturi.store import _connect

    from .harness import fresh_prefix
    from .tasks import Noop

    callers: collections.Counter[str] = collections.Counter()
    counting = False
    real = _connect.connect

    async def counted(*args: Any, **kwargs: Any) -> Any:
        if counting:
            frames = [f.name for f in traceback.extract_stack(limit=30)
                      if f"{os.sep}venturi{os.sep}" in f.filename
                      and not f.filename.endswith("_connect.py")]
            callers[" < ".join(reversed(frames[-3:])) or "?"] += 1
        return await real(*args, **kwargs)

    _connect.connect = counted  # the pool takes it when it is made, below
    async with fresh_prefix(dsn) as prefix, Queue.connect(dsn, prefix=prefix) as queue:
        if jobs:
            await queue.enqueue_many([Noop(n=i, uri="probe") for i in range(jobs)])
        counting = True
        await Worker(queue, tasks=[Noop], concurrency=25).run(until_empty=True)
        counting = False
    print(json.dumps(dict(callers)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(args.dsn, args.jobs))
        return
    warned = 0
    for n in range(args.processes):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.connprobe", "--child", "--jobs",
             str(args.jobs), "--dsn", args.dsn], capture_output=True, text=True, check=True)
        callers = json.loads(done.stdout.strip().splitlines()[-1])
        stray = NEVER_RETRIEVED in done.stderr
        warned += stray
        print(f"process {n + 1}: {sum(callers.values())} connections"
              f"{' + a never-retrieved future' if stray else ''}: "
              + "; ".join(f"{v} × {k}" for k, v in sorted(callers.items())))
    print(f"{warned} of {args.processes} processes printed '{NEVER_RETRIEVED}'")


if __name__ == "__main__":
    main()
