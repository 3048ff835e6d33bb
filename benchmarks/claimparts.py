"""What a pickup's claim statement costs beyond the raw loop's, part by part.

``python -m benchmarks.claimparts [--n 400] [--dsn DSN]`` enqueues one no-op job at a
time into a fresh prefix and claims it with one of these statements, taking turns
(the order rotates every round), each on a connection of its own, and times the
statement as the client sees it (sent → rows back, commit included); the job is then
marked done on another connection, untimed:

- **claim**: venturi's claim (venturi/store/postgres/claim.sql) with the parameters an
  idle worker of concurrency 10 sends (a window of 10, one reserved slot each for the
  normal and the low tier), on a connection with the claim sessions' settings
  (``CACHED_PLAN_SETTINGS``), planned once;
- **no kinds probe**: the same, with the kinds the worker asked for taken as open
  instead of probed in the kinds table for pauses and limits;
- **one tier**: a single scan of the normal tier (where the probe jobs are), with the
  leases joined in and every column of a job back, as the claim returns them;
- **one tier, two columns**: the same returning only the id and the payload;
- **raw**: the pickup scenario's raw claim (benchmarks/raw.py), on a plain connection.

The differences between neighbours say what each part of the claim costs at a pickup
on an idle queue (benchmarks/results-throughput.md, "The claim at a pickup, part by
part"). The variants exist only here: they drop what the claim must do (priorities,
reservations, pauses and limits). A diagnosis, not a benchmark figure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import re
import time

import asyncpg

from venturi import Queue
from venturi.store._connect import connect
from venturi.store._sql import queries
from venturi.store.postgres.driver import CACHED_PLAN_SETTINGS

from .harness import DEFAULT_DSN, fresh_prefix
from .raw import CLAIM, DONE
from .tasks import KIND, Noop

WARMUP = 20  # rounds run first and not counted: each connection's first plans
LEASE = dt.timedelta(minutes=5)


def variants(prefix: str) -> dict[str, str]:
    """The statements other than the raw one, by name."""
    claim = queries(prefix)["claim"].sql
    no_probe = re.sub(r"open_kinds AS \(.*?\n\)\s*,\n", "open_kinds AS (SELECT $2::text[] AS a),\n",
                      claim, flags=re.S)
    if no_probe == claim:
        raise RuntimeError("the claim's open_kinds CTE was not found: update claimparts.py")
    returning = claim[claim.rindex("RETURNING"):]
    one_tier = f"""
WITH kinds AS (
    SELECT k.kind, k.lease FROM unnest($2::text[], $3::interval[]) AS k(kind, lease)
), picked AS (
    SELECT id FROM {prefix}jobs AS j WHERE status = 'pending' AND priority = 1
      AND visible_at <= coalesce($1::timestamptz, now()) AND kind = ANY($2::text[])
    ORDER BY visible_at, id LIMIT $4 FOR UPDATE SKIP LOCKED
)
UPDATE {prefix}jobs AS j SET status = 'claimed', claimed_by = $7,
    run_count = j.run_count + 1, claim_expires_at = coalesce($1::timestamptz, now()) + k.lease
FROM picked, kinds AS k WHERE j.id = picked.id AND k.kind = j.kind AND $5::int + $6::int >= 0
"""
    return {"claim": claim, "no kinds probe": no_probe, "one tier": one_tier + returning,
            "one tier, two columns": one_tier + "RETURNING j.id, j.payload::text"}


async def run(dsn: str, n: int) -> dict[str, list[float]]:
    async with fresh_prefix(dsn) as prefix, Queue.connect(dsn, prefix=prefix) as queue:
        statements = variants(prefix)
        raw, done = CLAIM.format(p=prefix), DONE.format(p=prefix)
        conns: dict[str, asyncpg.Connection] = {}
        try:
            for name in [*statements, "raw"]:
                conns[name] = await connect(dsn)
                if name != "raw":
                    for key, value in CACHED_PLAN_SETTINGS.items():
                        await conns[name].execute(f"SET {key} = {value}")
            marker = await connect(dsn)
            conns["(marks done)"] = marker
            names = [*statements, "raw"]
            ms: dict[str, list[float]] = {name: [] for name in names}
            for i in range(-WARMUP, n):
                turn = i % len(names)
                for name in names[turn:] + names[:turn]:
                    await queue.enqueue(Noop(n=i, uri="claimparts"))
                    conn = conns[name]
                    start = time.perf_counter()
                    if name == "raw":
                        rows = await conn.fetch(raw, [KIND], 100, "raw/1")
                    else:
                        rows = await conn.fetch(statements[name], None, [KIND], [LEASE], 10,
                                                1, 1, "claimparts/1")
                    elapsed = time.perf_counter() - start
                    if len(rows) != 1:
                        raise RuntimeError(f"{name} claimed {len(rows)} jobs, not the one")
                    await marker.execute(done, [rows[0][0]])
                    if i >= 0:
                        ms[name].append(elapsed * 1000)
            return ms
        finally:
            for conn in conns.values():
                await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400, help="claims per statement")
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    args = parser.parse_args()
    ms = asyncio.run(run(args.dsn, args.n))
    print(f"{args.n} claims of one job each per statement, taking turns; ms, sent → rows back")
    print("| statement | p50 | p90 | p99 |")
    print("|---|---:|---:|---:|")
    for name, values in ms.items():
        values.sort()
        at = [values[min(len(values) - 1, int(q * len(values)))] for q in (0.5, 0.9, 0.99)]
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in at) + " |")


if __name__ == "__main__":
    main()
