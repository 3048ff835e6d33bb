"""A worker process for process-level tests (a stand-in for ``venturi worker``).

    python -m tests.worker.proc --dsn DSN --prefix P [--name N] [--concurrency 2]
        [--grace 1] [--poll 5] [--default-name host:1]

Runs the tasks of ``tests.worker.proctasks`` with signal handling on and exits
with ``worker.exit_code``; a refused start (``ConfigError``) is one line on
stderr and exit 2. ``--default-name`` makes the default name come out as given,
as it would for two containers sharing a hostname where every pid is 1.
"""

from __future__ import annotations

import argparse
import sys

import anyio

import venturi
import venturi.logs
from venturi.errors import ConfigError
from venturi.worker import config as worker_config

from .proctasks import PROC_TASKS, side_lifespan


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tests.worker.proc")
    p.add_argument("--dsn", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--name")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--grace", type=float, default=1.0)
    p.add_argument("--poll", type=float, default=5.0)
    p.add_argument("--default-name")
    return p.parse_args(argv)


async def _run(args: argparse.Namespace) -> int:
    async with venturi.Queue.connect(args.dsn, prefix=args.prefix, max_size=4) as queue:
        worker = venturi.Worker(
            queue, tasks=PROC_TASKS, concurrency=args.concurrency, name=args.name,
            grace=args.grace, poll_interval=args.poll, handle_signals=True,
            lifespan=side_lifespan(args.dsn, args.prefix),
        )
        await worker.run()
    assert worker.exit_code is not None
    return worker.exit_code


def main(argv: list[str]) -> int:
    args = _parse(argv)
    venturi.logs.configure("json", "debug")  # every event, one JSON object per line
    if args.default_name:
        worker_config.default_name = lambda: args.default_name
    try:
        return anyio.run(_run, args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
