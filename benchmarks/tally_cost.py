"""What the finished jobs' tally triggers (sql/0006_tallies.sql) cost the hot paths.

``python -m benchmarks.tally_cost [--rounds N]`` runs the store's own statements on two
fresh prefixes, one with the tally's triggers disabled, in alternation: one-job
enqueues, 1,000-job batches, and claim + settle of 50 jobs. It reports the CPU time
the database server spent per job (the backend's ``/proc/PID/schedstat``, so the
server must run on this host), which the machine's other load disturbs far less than
wall-clock time, and the wall-clock time for comparison; then a real worker
(concurrency 10) draining 2,000 no-op jobs on each, in jobs per second. Medians over
the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import venturi
from venturi._ids import uuid7_many
from venturi.store.base import Action, ClaimRequest, NewJob, NewJobBatch, Settlement
from venturi.store.postgres import PostgresStore

from .harness import DEFAULT_DSN, drop_prefix
from .tasks import Noop

TRIGGERS = ("insert", "update", "delete", "truncate")
LEASE = {"k": dt.timedelta(seconds=30)}
DRAIN = 2_000


async def _store(dsn: str, tally: bool) -> tuple[PostgresStore, int]:
    prefix = f"tc{uuid.uuid4().hex[:8]}_"
    store = await PostgresStore.connect(dsn, prefix=prefix, min_size=1, max_size=1)
    await store.migrate()
    async with store.pool.acquire() as conn:
        if not tally:
            for event in TRIGGERS:
                await conn.execute(f"ALTER TABLE {prefix}jobs DISABLE TRIGGER "
                                   f"{prefix}jobs_tally_{event}")
        pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    return store, pid


def _cpu(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


async def _measure(pid: int, n: int, fn: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    cpu, wall = _cpu(pid), time.perf_counter()
    await fn()
    return (_cpu(pid) - cpu) / n, (time.perf_counter() - wall) / n


async def _drain(dsn: str, prefix: str) -> float:
    """Jobs per second of a worker draining DRAIN no-op jobs (on a pool of its own)."""
    async with venturi.Queue.connect(dsn, prefix=prefix) as queue:
        await queue.enqueue_many([Noop(n=n, uri=f"file:///{n}") for n in range(DRAIN)])
        began = time.perf_counter()
        await venturi.Worker(queue, tasks=[Noop], concurrency=10).run(until_empty=True)
        return DRAIN / (time.perf_counter() - began)


async def main(dsn: str, rounds: int) -> None:
    stores = {name: await _store(dsn, tally) for name, tally in (("without", False),
                                                                  ("with", True))}
    results: dict[str, dict[str, list[tuple[float, float]]]] = {
        name: {"enqueue 1": [], "enqueue 1,000": [], "claim+settle 50": []} for name in stores}
    drains: dict[str, list[float]] = {name: [] for name in stores}
    try:
        for r in range(rounds):
            order = list(stores.items()) if r % 2 else list(reversed(stores.items()))
            for name, (store, pid) in order:
                async def one(store: PostgresStore = store) -> None:
                    for _ in range(200):
                        await store.enqueue([NewJob(id=uuid.uuid4(), kind="k", payload="{}")])

                async def batch(store: PostgresStore = store) -> None:
                    for _ in range(5):
                        ids = uuid7_many(1000)
                        await store.enqueue_batch(NewJobBatch(
                            ids, ["k"] * 1000, ["{}"] * 1000, [1] * 1000, [25] * 1000))

                async def drain(store: PostgresStore = store) -> None:
                    for _ in range(20):
                        got = await store.claim(ClaimRequest("w/b", LEASE, 50))
                        await store.settle_many("w/b", [Settlement(j.id, j.run_count,
                                                                   Action.COMPLETE)
                                                        for j in got])

                results[name]["enqueue 1"].append(await _measure(pid, 200, one))
                results[name]["enqueue 1,000"].append(await _measure(pid, 5000, batch))
                results[name]["claim+settle 50"].append(await _measure(pid, 1000, drain))
                drains[name].append(await _drain(dsn, store.prefix))
    finally:
        for store, _ in stores.values():
            await store.close()
            await drop_prefix(dsn, store.prefix)
    print("| per job | server CPU without | with | wall without | with |")
    print("|---|---:|---:|---:|---:|")
    for what in results["with"]:
        cells = []
        for part in (0, 1):
            for name in ("without", "with"):
                cells.append(statistics.median(v[part] for v in results[name][what]) * 1e6)
        print(f"| {what} | {cells[0]:.1f} µs | {cells[1]:.1f} µs | {cells[2]:.1f} µs | "
              f"{cells[3]:.1f} µs |")
    without, with_ = (statistics.median(drains[n]) for n in ("without", "with"))
    print(f"\nWorker drain, concurrency 10, {DRAIN:,} no-op jobs: {without:,.0f} jobs/s without, "
          f"{with_:,.0f} with ({with_ / without:.0%}); per round: "
          + ", ".join(f"{a / b:.0%}" for a, b in zip(drains["with"], drains["without"],
                                                     strict=True)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=10)
    ns = parser.parse_args()
    asyncio.run(main(ns.dsn, ns.rounds))
