"""Flow control: what limits cost (docs/concepts/flow-control.md).

Three in-process drains of N no-op jobs by ``Worker(concurrency=10)``, taking turns in
every run: without limits; with limits configured but not binding (``concurrency=10000``,
``rate="1000000/s"``: every claim goes through the limited claim's lock and count); and
plain jobs beside a kind whose limit binds (``concurrency=1``, held by another worker's
claim, with 1,000 jobs waiting): what a saturated kind costs the worker's other kinds.
"""

from __future__ import annotations

import time

import asyncpg

import venturi
from venturi import Queue, Worker

from ..harness import Bench, Figure, scenario, truncate
from ..raw import drain_on
from ..tasks import KIND, Noop
from .worker import fill, quiet_logs

LIMITED_KIND = "bench.limited"
CAPPED_KIND = "bench.capped"


class LimitedNoop(venturi.Task, kind=LIMITED_KIND, concurrency=10_000, rate="1000000/s"):
    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        return None


class CappedNoop(venturi.Task, kind=CAPPED_KIND, concurrency=1):
    n: int = 0
    uri: str = ""

    async def run(self, ctx: venturi.Context) -> None:
        return None


async def _saturate(conn: asyncpg.Connection, prefix: str, waiting: int) -> None:
    """One claim of the capped kind held by a worker that is not there (a far lease),
    and ``waiting`` of its jobs pending behind it."""
    await conn.execute(f"""
        INSERT INTO {prefix}jobs (id, kind, payload, status, claimed_by, claim_expires_at,
                                  run_count)
        VALUES (gen_random_uuid(), '{CAPPED_KIND}', '{{}}', 'claimed', 'elsewhere/boot',
                now() + interval '1 hour', 1)""")
    await conn.execute(f"""
        INSERT INTO {prefix}jobs (id, kind, payload)
        SELECT gen_random_uuid(), '{CAPPED_KIND}', '{{}}' FROM generate_series(1, $1::int)""",
        waiting)


@scenario("limits", "flow control: drains with limits configured, binding and not")
async def limits(bench: Bench) -> None:
    """Drains of N no-op jobs (20,000 at full size) by one in-process
    `Worker(concurrency=10)`: no limits; limits configured on the kind but not binding
    (`concurrency=10000, rate="1000000/s"`); and no-op jobs of an unlimited kind while
    the worker also serves a `concurrency=1` kind that is saturated (one claim held
    elsewhere, 1,000 jobs waiting); beside the raw asyncpg loop of the drain scenario
    (claim 100 + done 100 per statement). The four take turns in every run."""
    n = bench.size.drain
    async with (
        bench.fresh_prefix() as plain_p,
        bench.fresh_prefix() as limited_p,
        bench.fresh_prefix() as binding_p,
        bench.fresh_prefix() as raw_p,
        Queue.connect(bench.dsn, prefix=plain_p) as plain_q,
        Queue.connect(bench.dsn, prefix=limited_p) as limited_q,
        Queue.connect(bench.dsn, prefix=binding_p) as binding_q,
    ):
        conn = await asyncpg.connect(bench.dsn)
        contenders = {
            "raw100": (raw_p, KIND, lambda: drain_on(conn, raw_p, 100)),
            "plain": (plain_p, KIND, lambda: Worker(
                plain_q, tasks=[Noop], concurrency=10).run(until_empty=True)),
            "limited": (limited_p, LIMITED_KIND, lambda: Worker(
                limited_q, tasks=[LimitedNoop], concurrency=10).run(until_empty=True)),
            "binding": (binding_p, KIND, lambda: Worker(
                binding_q, tasks=[Noop, CappedNoop], concurrency=10).run(until_empty=True)),
        }
        names = list(contenders)
        secs: dict[str, list[float]] = {name: [] for name in names}
        try:
            with quiet_logs():
                for run in range(bench.size.runs):
                    for name in names[run % len(names):] + names[:run % len(names)]:
                        prefix, kind, drain = contenders[name]
                        await truncate(conn, prefix)
                        if name != "raw100":
                            await conn.execute(f"TRUNCATE {prefix}kind_starts")
                        await fill(conn, prefix, n, kind)
                        if name == "binding":
                            await _saturate(conn, prefix, 1_000)
                        start = time.perf_counter()
                        await drain()
                        secs[name].append(time.perf_counter() - start)
                        left = await conn.fetchval(
                            f"SELECT count(*) FROM {prefix}jobs WHERE kind = $1"
                            " AND status <> 'completed'", kind)
                        if left:
                            raise RuntimeError(f"{name}: {left} jobs not completed")
        finally:
            await conn.close()
    raw = "raw claim 100 + done 100 per statement"
    base = "Worker concurrency=10, no limits"
    bench.record(Figure(bench.scenario, raw, n, secs["raw100"], raw=True))
    bench.record(Figure(bench.scenario, base, n, secs["plain"], (raw,)))
    bench.record(Figure(bench.scenario, "limits configured, not binding", n, secs["limited"],
                        (raw, base), note='concurrency=10000, rate="1000000/s" on the kind'))
    bench.record(Figure(bench.scenario, "beside a saturated concurrency=1 kind", n,
                        secs["binding"], (raw, base),
                        note="the other kind: 1 claim held elsewhere, 1,000 jobs waiting"))
