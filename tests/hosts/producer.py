"""A producer process on a test host: enqueues ``Work(n)`` for n in 0..jobs-1 at a steady
rate over a window, exactly once each, and writes what the database acknowledged.

    python -m tests.hosts.producer --dsn DSN --prefix P --jobs 2000 --window 20 \
        --slow-every 20 --acks FILE

With ``--until FILE``, the producer goes on past ``--jobs`` at the same pace (numbers
continuing) until FILE exists: a scenario that needs work left at some moment (a healed
host's rejoin) ends the production only once that moment has passed. The last line of
its output says how many jobs it made.

Each acknowledged batch (``enqueue_many`` returned) is one line ``acked LO HI`` in
``--acks``. A batch whose commit is in doubt (the connection went away, the primary
failed over) is looked up before anything is repeated: only the numbers the database
does not have are enqueued again, so the queue ends with one job per number unless an
acknowledged commit was lost, which the test then counts. The loops are bounded by
``--patience`` seconds of failing to reach the database.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from typing import TextIO

import anyio
import asyncpg

import venturi

from .tasks import Work

TRANSIENT = (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def _present(dsn: str, prefix: str, lo: int, hi: int) -> set[int]:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        rows = await conn.fetch(
            f"SELECT (payload->>'n')::int AS n FROM {prefix}jobs"
            " WHERE kind = $1 AND (payload->>'n')::int >= $2 AND (payload->>'n')::int < $3",
            Work.__task__.kind, lo, hi)
        return {r["n"] for r in rows}
    finally:
        await conn.close()


async def produce(args: argparse.Namespace, acks: TextIO) -> int:
    batches = max(1, int(args.window / 0.1))
    per = -(-args.jobs // batches)
    failures = 0
    async with venturi.Queue.connect(args.dsn, prefix=args.prefix, max_size=2) as queue:
        began = time.monotonic()
        lo = 0
        for b in itertools.count():
            if lo >= args.jobs and (args.until is None or await anyio.Path(args.until).exists()):
                break
            hi = lo + per if lo >= args.jobs else min(args.jobs, lo + per)
            todo = list(range(lo, hi))
            stuck_since: float | None = None
            while todo:
                try:
                    await queue.enqueue_many(
                        [Work(n=n, slow=args.slow_every > 0 and n % args.slow_every == 0)
                         for n in todo])
                    acks.write(f"acked {' '.join(map(str, todo))}\n")
                    todo = []
                except venturi.VenturiError:
                    failures += 1
                    stuck_since = stuck_since or time.monotonic()
                    if time.monotonic() - stuck_since > args.patience:
                        print(f"gave up after {args.patience} s at batch {lo}",
                              file=sys.stderr)
                        return 1
                    await asyncio.sleep(0.2)
                    try:
                        there = await _present(args.dsn, args.prefix, lo, hi)
                    except TRANSIENT:
                        continue
                    done = [n for n in todo if n in there]
                    if done:
                        acks.write(f"found {' '.join(map(str, done))}\n")
                    todo = [n for n in todo if n not in there]
            lo = hi
            await asyncio.sleep(max(0.0, began + (b + 1) * 0.1 - time.monotonic()))
    print(f"produced {lo} jobs; {failures} enqueue attempts failed", flush=True)
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tests.hosts.producer")
    p.add_argument("--dsn", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--window", type=float, required=True)
    p.add_argument("--slow-every", type=int, default=0)
    p.add_argument("--acks", required=True)
    p.add_argument("--patience", type=float, default=120.0)
    p.add_argument("--until", default=None,
                   help="after --jobs, go on at the same pace until this file exists")
    args = p.parse_args(argv)
    with open(args.acks, "a", buffering=1) as acks:
        return asyncio.run(produce(args, acks))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
