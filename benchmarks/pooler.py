"""Enqueue and drain throughput direct to PostgreSQL vs behind PgBouncer in transaction
mode (a private pgbouncer started here, tests/pgbouncer.py), on the shared server.

    python -m benchmarks.pooler [--jobs 20000] [--rounds 2]

Modes: ``direct`` (asyncpg's statement cache on), ``direct-nocache`` (``pooler=True``
on a direct connection: what turning the cache off costs by itself) and ``pgbouncer``
(``pooler=True`` through the bouncer, LISTEN and the worker's lock on ``listen_dsn``).
Per mode and round: single enqueues from 8 concurrent producers, ``enqueue_many`` in
batches of 500, then an in-process worker (concurrency 20) drains everything
(``run(until_empty=True)``). Results go to benchmarks/results-pooler.md.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shlex
import statistics
import sys
import time
from pathlib import Path

import venturi
import venturi.logs
from benchmarks.harness import drop_prefix
from tests import pgbouncer
from tests.chaos.tasks import Noop

DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/test"
HERE = Path(__file__).resolve().parent
MODES = ("direct", "direct-nocache", "pgbouncer")


async def one_round(mode: str, pg_dsn: str, bouncer_dsn: str, jobs: int,
                    singles: int) -> dict[str, float]:
    dsn = bouncer_dsn if mode == "pgbouncer" else pg_dsn
    pooler = mode != "direct"
    # A pooler store refuses a listen_dsn equal to its dsn (it would be the pooler too);
    # in direct-nocache both reach PostgreSQL directly, so tell them apart by name.
    listen_dsn = f"{pg_dsn}?application_name=venturi-listen" if pooler else None
    prefix = f"pool{secrets.token_hex(4)}_"
    try:
        async with venturi.Queue.connect(dsn, prefix=prefix, pooler=pooler,
                                         listen_dsn=listen_dsn, max_size=10) as queue:
            await queue.migrate()
            counter = iter(range(singles))

            async def producer() -> None:
                for n in counter:
                    await queue.enqueue(Noop(n=n))

            began = time.monotonic()
            await asyncio.gather(*(producer() for _ in range(8)))
            single = singles / (time.monotonic() - began)
            began = time.monotonic()
            for lo in range(0, jobs, 500):
                await queue.enqueue_many([Noop(n=n) for n in range(lo, min(jobs, lo + 500))])
            batch = jobs / (time.monotonic() - began)
            worker = venturi.Worker(queue, tasks=[Noop], concurrency=20, listen_dsn=listen_dsn)
            began = time.monotonic()
            await worker.run(until_empty=True)
            drain = (singles + jobs) / (time.monotonic() - began)
            left = await queue.count(statuses=[venturi.Status.PENDING, venturi.Status.CLAIMED])
            if left:
                raise RuntimeError(f"{mode}: {left} jobs left after the drain")
        return {"single": single, "batch": batch, "drain": drain}
    finally:
        await drop_prefix(pg_dsn, prefix)


async def bench(pg_dsn: str, jobs: int, singles: int, rounds: int,
                pool_size: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    with pgbouncer.bouncer(pg_dsn, pool_size=pool_size) as bouncer_dsn:
        for _ in range(rounds):  # interleaved, so that the machine's noise hits every mode
            for mode in MODES:
                results[mode].append(await one_round(mode, pg_dsn, bouncer_dsn, jobs, singles))
    return results


def render(results: dict[str, list[dict[str, float]]], command: str, jobs: int, singles: int,
           pool_size: int) -> str:
    lines = [
        "## Direct vs PgBouncer (transaction mode)", "",
        f"Command: `{command}`", "",
        f"pgbouncer 1.18 (Debian), pool_mode=transaction, default_pool_size={pool_size};"
        " Queue pool max_size=10; shared PostgreSQL 15 on 127.0.0.1:5432; 2 shared cores"
        " (noisy: other engineers' tests run at the same time). Median of the rounds,"
        " every round in brackets.", "",
        f"| mode | single enqueue, 8 producers ({singles} jobs) | enqueue_many x500"
        f" ({jobs} jobs) | drain, worker concurrency 20 ({jobs + singles} jobs) |",
        "|---|---|---|---|",
    ]
    for mode, rounds in results.items():
        cells = []
        for key in ("single", "batch", "drain"):
            values = [r[key] for r in rounds]
            each = ", ".join(f"{v:.0f}" for v in values)
            cells.append(f"{statistics.median(values):.0f} jobs/s ({each})")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pooler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", default=DEFAULT_DSN)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--singles", type=int, default=2_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--pool-size", type=int, default=10)
    p.add_argument("--out", type=Path, default=HERE / "results-pooler.md")
    args = p.parse_args(argv)
    if pgbouncer.binary() is None:
        print("pgbouncer is not installed (apt-get install pgbouncer)", file=sys.stderr)
        return 2
    venturi.logs.configure("console", "warning")  # a log line per job would be the benchmark
    results = asyncio.run(bench(args.dsn, args.jobs, args.singles, args.rounds, args.pool_size))
    command = shlex.join(["python", "-m", "benchmarks.pooler", *argv])
    text = render(results, command, args.jobs, args.singles, args.pool_size)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
