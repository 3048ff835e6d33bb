"""The claim statement alone, warm and after an idle gap: venturi's against the raw loop's.

``python -m benchmarks.claimcold [--rounds 1000] [--idle 0.02] [--dsn DSN]``: on a fresh
prefix, each round COPYs one runnable job and claims it, once through venturi's store
(``Store.claim`` with what an idle worker of concurrency 10 asks: up to 10 jobs, one slot
reserved for each lower tier; the statement as the worker runs it, records built) and once
with the raw loop's statement (benchmarks/raw.py ``CLAIM``, plain asyncpg), the two taking
turns, each on a warm connection of its own. Two passes: **warm** (the claim sent right
after the COPY) and **cold** (``--idle`` seconds of sleep first, as a pickup comes after
an idle spell: the client, the server's backend and the CPU caches have been doing other
things). Reported: p50 / p90 / p99 of each claim's round trip as the caller sees it.

What it shows: whether the difference a pickup sees (benchmarks/pickuptrace.py, "claim
round trip") is the statement's own cost or the cost of running a longer path cold
(benchmarks/results-throughput.md, "Pickup: the worker's path runs cold"). Nothing here
is a benchmark figure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import time

import asyncpg

from venturi import Queue
from venturi.store.base import ClaimRequest

from .harness import DEFAULT_DSN, fresh_prefix
from .raw import CLAIM
from .scenarios.worker import fill

KIND = "bench.claimcold"
LEASE = dt.timedelta(seconds=60)


def _summary(seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)

    def q(p: float) -> float:
        return ms[min(len(ms) - 1, int(len(ms) * p))]

    return f"p50 {q(0.5):.3f}  p90 {q(0.9):.3f}  p99 {q(0.99):.3f} ms"


async def _pass(queue: Queue, raw: asyncpg.Connection, conn: asyncpg.Connection, prefix: str,
                rounds: int, idle: float) -> dict[str, list[float]]:
    request = ClaimRequest("claimcold", {KIND: LEASE}, 10, reserve_normal=1, reserve_low=1)
    sql = CLAIM.format(p=prefix)
    took: dict[str, list[float]] = {"venturi": [], "raw": []}
    for i in range(rounds):
        for name in (("venturi", "raw") if i % 2 else ("raw", "venturi")):
            await fill(conn, prefix, 1, KIND)
            if idle:
                await asyncio.sleep(idle)
            began = time.perf_counter()
            if name == "raw":
                got = await raw.fetch(sql, [KIND], 10, "claimcold")
            else:
                got = await queue.store.claim(request)
            took[name].append(time.perf_counter() - began)
            if len(got) != 1:
                raise RuntimeError(f"{name}: claimed {len(got)} jobs, not the one just added")
    return took


async def _main(args: argparse.Namespace) -> None:
    async with fresh_prefix(args.dsn) as prefix, Queue.connect(args.dsn, prefix=prefix) as q:
        conn, raw = await asyncpg.connect(args.dsn), await asyncpg.connect(args.dsn)
        try:
            await _pass(q, raw, conn, prefix, 20, 0.0)  # connections and plans warmed
            for label, idle in (("warm", 0.0), (f"after {args.idle * 1000:g} ms idle",
                                                args.idle)):
                took = await _pass(q, raw, conn, prefix, args.rounds, idle)
                print(f"{label}, {args.rounds} alternated rounds:")
                for name, seconds in took.items():
                    print(f"  {name:8} {_summary(seconds)}")
        finally:
            await conn.close()
            await raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=0.02, help="seconds before a cold claim")
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
