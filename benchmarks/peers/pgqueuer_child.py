"""A PgQueuer consumer in a process of its own, for benchmarks/scenarios/peers.py.

``python pgqueuer_child.py DSN CONCURRENCY`` in the PgQueuer venv; protocol in
``_proto.py``. The consumer is PgQueuer's ``QueueManager`` with one no-op entrypoint,
run as its documentation runs a drain with a concurrency limit:
``run(mode=drain, max_concurrent_tasks=CONCURRENCY)``, all else default
(``batch_size=10``) except where PgQueuer refuses the default: it wants
``max_concurrent_tasks >= 2 * batch_size``, so at concurrency 10 the batch is 5. On
uvloop, as PgQueuer's own CLI (``pgq run``) runs.
"""

from __future__ import annotations

import json
import sys
import time

import asyncpg
import uvloop
from _proto import line, payload, say
from pgqueuer import QueueManager
from pgqueuer.models import Job
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode

ENTRYPOINT = "bench_noop"
TABLES = "pgqueuer, pgqueuer_log, pgqueuer_statistics"


async def main(dsn: str, concurrency: int) -> None:
    producer = await asyncpg.connect(dsn)
    queries = Queries.from_asyncpg_connection(producer)
    consumer = await asyncpg.connect(dsn)
    ran = 0
    qm = QueueManager(Queries.from_asyncpg_connection(consumer))

    @qm.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        nonlocal ran
        assert job.payload is not None
        json.loads(job.payload)
        ran += 1

    say("ready")
    while (cmd := await line()) not in ("exit", ""):
        verb, _, arg = cmd.partition(" ")
        if verb == "fill":
            n = int(arg)
            await producer.execute(f"TRUNCATE {TABLES}")
            await queries.enqueue([ENTRYPOINT] * n,
                                  [json.dumps(payload(i)).encode() for i in range(n)], [0] * n)
            ran = 0
            say("filled")
        elif verb == "go":
            start = time.perf_counter()
            await qm.run(mode=QueueExecutionMode.drain, max_concurrent_tasks=concurrency,
                         batch_size=min(10, concurrency // 2))
            seconds = time.perf_counter() - start
            left = await producer.fetchval("SELECT count(*) FROM pgqueuer")
            say("done", {"seconds": seconds, "jobs": ran, "left": left})
        elif verb == "enqueue":
            n = int(arg)
            await producer.execute(f"TRUNCATE {TABLES}")
            start = time.perf_counter()
            for i in range(n):
                await queries.enqueue(ENTRYPOINT, json.dumps(payload(i)).encode())
            seconds = time.perf_counter() - start
            say("done", {"seconds": seconds, "jobs": n})
        else:
            raise SystemExit(f"unknown command {cmd!r}")
    await producer.close()
    if not consumer.is_closed():
        await consumer.close()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1], int(sys.argv[2])))
