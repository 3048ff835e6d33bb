"""A worker process for the flow-control tests (a stand-in for ``venturi worker``).

    python -m tests.flow.proc --dsn DSN --prefix P [--concurrency 20]
"""

from __future__ import annotations

import argparse
import sys

import anyio

import venturi

from .tasks import FLOW_TASKS, side_lifespan


async def _run(args: argparse.Namespace) -> int:
    async with venturi.Queue.connect(args.dsn, prefix=args.prefix, max_size=6) as queue:
        worker = venturi.Worker(
            queue, tasks=FLOW_TASKS, concurrency=args.concurrency, grace=1.0,
            poll_interval=5.0, handle_signals=True, lifespan=side_lifespan(args.dsn, args.prefix))
        await worker.run()
    assert worker.exit_code is not None
    return worker.exit_code


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tests.flow.proc")
    p.add_argument("--dsn", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--concurrency", type=int, default=20)
    return anyio.run(_run, p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
