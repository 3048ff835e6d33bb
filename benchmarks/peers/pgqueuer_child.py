"""A PgQueuer consumer in a process of its own, for benchmarks/scenarios/peers.py.

``python pgqueuer_child.py DSN CONCURRENCY [BATCH]`` in the PgQueuer venv; protocol in
``_proto.py``. The consumer is PgQueuer's ``QueueManager`` with one no-op entrypoint,
run as its documentation runs a drain with a concurrency limit:
``run(mode=drain, max_concurrent_tasks=CONCURRENCY)``, all else default
(``batch_size=10``) except where PgQueuer refuses the default: it wants
``max_concurrent_tasks >= 2 * batch_size``, so at concurrency 10 the batch is 5. On
uvloop, as PgQueuer's own CLI (``pgq run``) runs. ``BATCH`` sets ``batch_size`` instead
(the scenario also measures the largest it accepts, half the concurrency).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import asyncpg
import uvloop
from _proto import line, payload, say, started
from pgqueuer import QueueManager
from pgqueuer.models import Job
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode

ENTRYPOINT = "bench_noop"
TABLES = "pgqueuer, pgqueuer_log, pgqueuer_statistics"


async def main(dsn: str, concurrency: int, batch: int) -> None:
    producer = await asyncpg.connect(dsn)
    queries = Queries.from_asyncpg_connection(producer)
    consumer = await asyncpg.connect(dsn)
    ran, probing = 0, False
    qm = QueueManager(Queries.from_asyncpg_connection(consumer))
    listening: asyncio.Task[None] | None = None

    @qm.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        nonlocal ran
        assert job.payload is not None
        n = json.loads(job.payload)["n"]
        ran += 1
        if probing:
            started(n)

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
                         batch_size=batch)
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
        elif verb == "listen":
            await producer.execute(f"TRUNCATE {TABLES}")
            probing = True
            listening = asyncio.create_task(
                qm.run(max_concurrent_tasks=concurrency, batch_size=batch))
            say("listening")
        elif verb == "commit":
            await queries.enqueue(ENTRYPOINT, json.dumps(payload(int(arg))).encode())
            say(f"committed {arg} {time.perf_counter()!r}")
        else:
            raise SystemExit(f"unknown command {cmd!r}")
    if listening is not None:
        qm.shutdown.set()
        await listening
    await producer.close()
    if not consumer.is_closed():
        await consumer.close()


if __name__ == "__main__":
    c = int(sys.argv[2])
    uvloop.run(main(sys.argv[1], c, int(sys.argv[3]) if sys.argv[3:] else min(10, c // 2)))
