"""An oban (Python) consumer in a process of its own, for benchmarks/scenarios/peers.py.

``python oban_child.py DSN CONCURRENCY`` in the oban venv (Python >= 3.12); protocol in
``_proto.py``. The consumer is what ``oban start --queues bench:CONCURRENCY`` runs: an
``Oban`` instance on ``Oban.create_pool`` (its defaults: 1-10 connections) with one queue
whose limit is the concurrency, everything else default, orjson for JSON and uvloop, as
oban's CLI sets them. oban has no drain mode: the run ends when the handler has run every
job and the database holds no job that is not ``completed`` (oban acknowledges in
batches, after the handler returns), polled every 2 ms from the moment the last handler
returned; ``stop()`` comes after, untimed.
"""

from __future__ import annotations

import asyncio
import sys
import time

import orjson
import uvloop
from _proto import line, payload, say, started
from oban import Oban, worker
from psycopg.types.json import set_json_dumps, set_json_loads

QUEUE = "bench"
ALL_RAN = asyncio.Event()
RAN = [0, 0]  # handler calls so far, calls expected
PROBING = [False]


@worker(queue=QUEUE)
class Noop:
    async def process(self, job: object) -> None:
        args = job.args  # type: ignore[attr-defined]  # decoded by oban
        assert isinstance(args["n"], int)
        RAN[0] += 1
        if RAN[0] == RAN[1]:
            ALL_RAN.set()
        if PROBING[0]:
            started(args["n"])


async def main(dsn: str, concurrency: int) -> None:
    set_json_dumps(orjson.dumps)
    set_json_loads(orjson.loads)
    pool = await Oban.create_pool(dsn)
    filler = Oban(pool=pool, name="filler")  # client mode: no queues, no leadership
    consumer = Oban(pool=pool, queues={QUEUE: concurrency})

    async def left() -> int:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) FROM oban_jobs WHERE state <> 'completed'")
            row = await cur.fetchone()
            assert row is not None
            return int(row[0])

    async def empty() -> None:
        async with pool.connection() as conn:
            await conn.execute("TRUNCATE oban_jobs")

    say("ready")
    while (cmd := await line()) not in ("exit", ""):
        verb, _, arg = cmd.partition(" ")
        if verb == "fill":
            n = int(arg)
            await empty()
            await filler.enqueue_many([Noop.new(payload(i)) for i in range(n)])
            RAN[:] = [0, n]
            ALL_RAN.clear()
            say("filled")
        elif verb == "go":
            start = time.perf_counter()
            await consumer.start()
            await ALL_RAN.wait()
            deadline = time.monotonic() + 60
            while await left():
                if time.monotonic() > deadline:
                    raise SystemExit("oban: jobs still not completed 60 s after the last ran")
                await asyncio.sleep(0.002)
            seconds = time.perf_counter() - start
            await consumer.stop()
            say("done", {"seconds": seconds, "jobs": RAN[0], "left": await left()})
        elif verb == "enqueue":
            n = int(arg)
            await empty()
            start = time.perf_counter()
            for i in range(n):
                await filler.enqueue(Noop.new(payload(i)))
            seconds = time.perf_counter() - start
            say("done", {"seconds": seconds, "jobs": n})
        elif verb == "listen":
            await empty()
            PROBING[0] = True
            await consumer.start()
            say("listening")
        elif verb == "commit":
            await filler.enqueue(Noop.new(payload(int(arg))))
            say(f"committed {arg} {time.perf_counter()!r}")
        else:
            raise SystemExit(f"unknown command {cmd!r}")
    if PROBING[0]:
        await consumer.stop()
    await pool.close()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1], int(sys.argv[2])))
