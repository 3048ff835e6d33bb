"""A worker process for the clock-skew test: ``venturi worker`` has no option for the
fallback poll, and that test needs it out of the way (an hour), so that only the
worker's own timers can pick delayed and periodic work up on time.

    python -m tests.hosts.worker --dsn DSN --prefix P --kinds a,b [--name N] [--poll 3600]

Built through the public API only (``venturi.Worker``), logging JSON lines to stdout.
"""

from __future__ import annotations

import argparse
import sys

import anyio

import venturi

from .tasks import SKEW_TASKS


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tests.hosts.worker")
    p.add_argument("--dsn", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--kinds", required=True)
    p.add_argument("--name")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--poll", type=float, default=3600.0)
    return p.parse_args(argv)


async def _run(args: argparse.Namespace) -> int:
    tasks = [cls for group in SKEW_TASKS.values() for cls in group]
    async with venturi.Queue.connect(args.dsn, prefix=args.prefix, max_size=4) as queue:
        worker = venturi.Worker(queue, tasks=tasks, kinds=args.kinds.split(","),
                                concurrency=args.concurrency, name=args.name,
                                poll_interval=args.poll, grace=1.0, handle_signals=True)
        await worker.run()
    assert worker.exit_code is not None
    return worker.exit_code


def main(argv: list[str]) -> int:
    venturi.logs.configure("json", "info")  # as `venturi worker --log-format json` does
    return anyio.run(_run, _parse(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
