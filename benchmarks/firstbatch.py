"""A new Queue's first batches, and the type introspections asyncpg sends for them.

``python -m benchmarks.firstbatch [--rounds 4] [--jobs 100] [--introspect] [--dsn DSN]``
opens a new ``Queue`` (a pool of new connections) ``--rounds`` times and times its first
three ``enqueue_many`` of ``--jobs`` no-op jobs, counting the type introspection
queries asyncpg sends meanwhile (a wrapper on ``Connection._introspect_types``).
``--introspect`` leaves the built-in arrays unknown to the new connections, as before
``venturi/store/_asyncpg_types.py``, so both sides are measured with one tree
(benchmarks/results-throughput.md, "Type introspection"). A diagnosis, not a benchmark
figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import asyncpg.connection

from venturi import Queue
from venturi.store import _connect

from .harness import DEFAULT_DSN, fresh_prefix
from .tasks import Noop

INTROSPECTIONS: list[list[int]] = []


def _count_introspections() -> None:
    real = asyncpg.connection.Connection._introspect_types

    async def counted(self: Any, typeoids: Any, timeout: Any) -> Any:  # noqa: ASYNC109 - asyncpg's
        INTROSPECTIONS.append(sorted(typeoids))
        return await real(self, typeoids, timeout)

    asyncpg.connection.Connection._introspect_types = counted  # type: ignore[method-assign]


async def _main(args: argparse.Namespace) -> None:
    _count_introspections()
    if args.introspect:
        _connect.know_builtin_arrays = lambda conn: False  # type: ignore[assignment]
    async with fresh_prefix(args.dsn) as prefix:
        for _ in range(args.rounds):
            INTROSPECTIONS.clear()
            async with Queue.connect(args.dsn, prefix=prefix) as q:
                took = []
                for _ in range(3):
                    began = time.perf_counter()
                    await q.enqueue_many([Noop(n=n, uri="x") for n in range(args.jobs)])
                    took.append((time.perf_counter() - began) * 1e3)
            print(f"enqueue_many({args.jobs}) on a new Queue: "
                  + ", ".join(f"{t:.1f}" for t in took)
                  + f" ms; type introspections {len(INTROSPECTIONS)} {INTROSPECTIONS}",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--introspect", action="store_true",
                        help="leave the built-in arrays to asyncpg's introspection")
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
