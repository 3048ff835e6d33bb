"""Where a producer call's client time goes: cProfile of ``SyncQueue.enqueue`` and of
``Queue.enqueue(conn=<AsyncSession>)`` one job at a time, and the client CPU per call;
with ``--asyncpg``, of ``Queue.enqueue`` through its own pool and ``enqueue_many`` of
1,000 instead (benchmarks/results-enqueue.md).

    python -m benchmarks.profile_producers [--dsn DSN] [--jobs 2000] [--top 25] [--asyncpg]

Each profile runs after a warm-up of 200 calls, in a throwaway prefix; the table of
functions is sorted by their own time (``tottime``). Client CPU per call is measured
without the profiler (``time.process_time``, so waiting on the server is not in it).
benchmarks/results-producers.md shows its output before and after the changes it
was written for.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import time
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from venturi import Queue, SyncQueue

from .harness import fresh_prefix
from .tasks import task

DSN = "postgresql://root@127.0.0.1:5432/test"


def _table(profile: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


async def _per_call(fn: Callable[[int], Awaitable[None]], jobs: int) -> tuple[float, float]:
    """(wall µs, client CPU µs) per call over ``jobs`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    await fn(jobs)
    return ((time.perf_counter() - wall) / jobs * 1e6,
            (time.process_time() - cpu) / jobs * 1e6)


async def _report(name: str, fn: Callable[[int], Awaitable[None]], jobs: int, top: int) -> None:
    await fn(200)
    wall, cpu = await _per_call(fn, jobs)
    profile = cProfile.Profile()
    profile.enable()
    await fn(jobs)
    profile.disable()
    print(f"## {name}: {jobs} calls, {wall:,.0f} µs wall and {cpu:,.0f} µs client CPU "
          "per call (without the profiler)\n")
    print(_table(profile, top))


async def main(dsn: str, jobs: int, top: int, driver: str) -> None:
    tasks = [task(i) for i in range(jobs)]
    async with fresh_prefix(dsn) as prefix:
        with SyncQueue.connect(dsn, prefix=prefix, min_size=1, max_size=1) as queue:
            async def sync(n: int) -> None:
                for t in tasks[:n]:
                    queue.enqueue(t)

            await _report("SyncQueue.enqueue", sync, jobs, top)
        url = f"postgresql+{driver}://{dsn.split('://', 1)[1]}"
        engine = create_async_engine(url, pool_size=1, isolation_level="AUTOCOMMIT")
        try:
            async with Queue.connect(dsn, prefix=prefix, max_size=1) as aqueue, \
                    AsyncSession(engine) as session:
                async def on_session(n: int) -> None:
                    for t in tasks[:n]:
                        await aqueue.enqueue(t, conn=session)

                await _report(f"Queue.enqueue(conn=<AsyncSession+{driver}>)", on_session,
                              jobs, top)
        finally:
            await engine.dispose()


async def asyncpg_paths(dsn: str, jobs: int, top: int) -> None:
    tasks = [task(i) for i in range(jobs)]
    async with fresh_prefix(dsn) as prefix, \
            Queue.connect(dsn, prefix=prefix, min_size=1, max_size=1) as queue:
        async def one(n: int) -> None:
            for t in tasks[:n]:
                await queue.enqueue(t)

        async def many(n: int) -> None:
            for start in range(0, n, 1_000):
                await queue.enqueue_many(tasks[start:min(start + 1_000, n)])

        await _report("Queue.enqueue (its own pool)", one, jobs, top)
        await _report("Queue.enqueue_many, 1,000 per call (per job)", many, jobs, top)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DSN)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--driver", default="asyncpg", choices=["asyncpg", "psycopg"])
    parser.add_argument("--asyncpg", action="store_true",
                        help="profile Queue.enqueue and enqueue_many on venturi's own pool")
    args = parser.parse_args()
    if args.asyncpg:
        asyncio.run(asyncpg_paths(args.dsn, args.jobs, args.top))
    else:
        asyncio.run(main(args.dsn, args.jobs, args.top, args.driver))
