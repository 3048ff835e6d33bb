"""A worker process that records its spans (a stand-in for ``venturi worker`` in an
application that traces).

    python -m tests.tracing.proc --dsn DSN --prefix P --spans FILE

Sets the SDK's tracer provider with an in-memory exporter before the worker starts,
runs the tasks of ``tests.tracing.tasks`` until drained (``Queue.drain``), then writes
every finished span to FILE as a JSON list (``tests.tracing.spans.as_data``). Logs are
JSON lines on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

import venturi
import venturi.logs

from .spans import as_data, install, recording
from .tasks import WORKER_TASKS


async def _run(args: argparse.Namespace) -> int:
    async with venturi.Queue.connect(args.dsn, prefix=args.prefix, max_size=4) as queue:
        worker = venturi.Worker(queue, tasks=WORKER_TASKS, concurrency=4, grace=1,
                                poll_interval=1, handle_signals=True)
        await worker.run()
    assert worker.exit_code is not None
    return worker.exit_code


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tests.tracing.proc")
    p.add_argument("--dsn", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--spans", required=True, type=Path)
    args = p.parse_args(argv)
    venturi.logs.configure("json", "debug")
    provider, exporter = recording()
    install(provider)
    code = anyio.run(_run, args)
    spans = [as_data(s) for s in exporter.get_finished_spans()]
    args.spans.write_text(json.dumps(spans, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
