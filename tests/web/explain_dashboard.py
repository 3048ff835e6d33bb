"""EXPLAIN (ANALYZE, BUFFERS) of what the dashboard asks the database, at
1,000,000 finished + 100,000 scheduled rows (benchmarks/explain.py's table).

``python -m tests.web.explain_dashboard [--finished N] [--future N]`` prints one
line per statement and writes every plan to ``--out`` (default
/tmp/dashboard-explain.md). It covers the store statements the pages issue, and
what ``Queue.stats()`` sent before the finished jobs had a tally (``BEFORE``).
Not a test: it takes a minute or two and a few hundred MB of disk.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks.explain import Shape, load
from benchmarks.harness import fresh_prefix
from tests.conftest import DEFAULT_DSN
from venturi._ids import uuid7_floor
from venturi.store import _sql

_INDEX = re.compile(r"(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)?"
                    r"(?: using| on) ([\w{}]+)")
_SEQ = re.compile(r"Seq Scan on ([\w{}]+)")
_TIME = re.compile(r"Execution Time: ([\d.]+) ms")
_ROWS = re.compile(r"Rows Removed by Filter: (\d+)")
_BUFFERS = re.compile(r"Buffers: shared hit=(\d+)(?: read=(\d+))?")

# What Queue.stats() sent before the tally (sql/0006_tallies.sql): for the before/after
# table of docs/operations/dashboard.md. {p} is the table prefix.
BEFORE = {
    "stats_active": """
        SELECT kind, status, visible_at <= now() AS runnable, count(*) AS n,
               min(visible_at) FILTER (WHERE visible_at <= now()) AS oldest_visible
        FROM {p}jobs WHERE status IN ('pending', 'claimed')
        GROUP BY kind, status, runnable""",
    "stats_dead": "SELECT kind, count(*) AS n FROM {p}jobs WHERE status = 'dead' GROUP BY kind",
    "stats_finished": "SELECT count(*) FROM {p}jobs WHERE finished_at IS NOT NULL",
}


@dataclass
class Case:
    label: str
    name: str  # a statement of venturi/store/postgres/*.sql, or a BEFORE key
    args: tuple[Any, ...]


def cases(now: dt.datetime) -> list[Case]:
    hour_ago, ten_days = now - dt.timedelta(hours=1), now - dt.timedelta(days=10)
    every = ["pending", "claimed", "completed", "dead"]
    return [
        Case("before: stats, active jobs by kind", "stats_active", ()),
        Case("before: stats, dead by kind", "stats_dead", ()),
        Case("before: stats, finished count", "stats_finished", ()),
        Case("stats (one statement)", "stats", ()),
        Case("count: every job by status", "count_status", (None, every)),
        Case("count: completed of one kind", "count_status", ("embed", ["completed"])),
        Case("overview: latest 10 dead", "detail_failed", (10,)),
        Case("overview: finished per minute, the hour before (at most 200,000)",
             "finished_per_minute", (hour_ago, now, 200_000)),
        Case("jobs: first page, no filter", "query_jobs",
             (None, None, None, None, None, 51, None)),
        Case("jobs: kind=embed", "query_jobs", ("embed", None, None, None, None, 51, None)),
        Case("jobs: status=dead, by their death", "dead_jobs", (None, None, None, None, None, 51)),
        Case("jobs: status=dead, a page deep", "dead_jobs",
             (None, now - dt.timedelta(hours=20), uuid.UUID(int=0), None, None, 51)),
        Case("jobs: claimed of a rare kind, by lease", "claimed_jobs",
             ("rare", None, None, None, None, 51)),
        Case("jobs: created before 10 days ago", "query_jobs",
             (None, None, None, None, uuid7_floor(ten_days), 51, None)),
        Case("jobs: completed, created in the last hour", "query_jobs",
             (None, "completed", None, None, None, 51, uuid7_floor(hour_ago))),
        Case("jobs: created in the last hour, counted up to 10,001", "count_between",
             (None, every, uuid7_floor(hour_ago), None, 10_001)),
        Case("jobs: a subject's subtree, newest first", "query_jobs_subject",
             ("file:///bucket/42", None, None, None, None, None, None, 51)),
        Case("jobs: a subject's total, counted up to 10,001", "count_subject",
             ("file:///bucket/42", None, every, None, None, 10_001)),
        Case("periodic: every live occurrence", "periodic_jobs", ()),
    ]


async def extra_rows(conn: asyncpg.Connection, prefix: str) -> None:
    """A rare kind with a few claimed and one periodic pending job, all ten days old,
    so a filter matching fewer rows than its LIMIT has to walk a third of the table."""
    ts = "now() - interval '10 days'"
    ms = f"lpad(to_hex((extract(epoch FROM {ts}) * 1000)::bigint), 12, '0')"
    await conn.execute(f"""
        INSERT INTO {prefix}jobs (id, kind, payload, status, created_at, visible_at,
                                  claim_expires_at, claimed_by, run_count, periodic)
        SELECT ({ms} || '7e008' || lpad(to_hex(g), 15, '0'))::uuid, 'rare', '{{}}',
               CASE WHEN g = 0 THEN 'pending' ELSE 'claimed' END, {ts}, {ts},
               CASE WHEN g = 0 THEN NULL ELSE now() + interval '30 seconds' END,
               CASE WHEN g = 0 THEN NULL ELSE 'w/boot' END, 1, g = 0
        FROM generate_series(0, 5) AS g""")
    await conn.execute(f"ANALYZE {prefix}jobs")


async def explain(conn: asyncpg.Connection, prefix: str, case: Case) -> dict[str, Any]:
    if case.name in BEFORE:
        sql, args = BEFORE[case.name].format(p=prefix), case.args
    else:
        query = _sql.queries(prefix)[case.name]
        sql, args = query.sql, ((None, *case.args) if query.uses_now else case.args)
    # Twice, reporting the second: the figures are of a warm cache, not of the first
    # statement after the load that evicts what the one before it read.
    await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args)
    rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args)
    plan = "\n".join(r[0] for r in rows).replace(prefix, "{prefix}")
    found = _TIME.search(plan)
    return {"case": case, "plan": plan, "ms": float(found.group(1)) if found else float("nan"),
            "indexes": list(dict.fromkeys(i.replace("{prefix}", "")
                                          for i in _INDEX.findall(plan))),
            "seq": [s.replace("{prefix}", "") for s in _SEQ.findall(plan)],
            "filtered": sum(int(n) for n in _ROWS.findall(plan)),
            "buffers": _top_buffers(plan)}


def _top_buffers(plan: str) -> int:
    """Shared buffers the statement touched (its plan's first Buffers line)."""
    found = _BUFFERS.search(plan)
    return 0 if found is None else int(found.group(1)) + int(found.group(2) or 0)


async def main(dsn: str, finished: int, future: int) -> str:
    async with fresh_prefix(dsn) as prefix:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SET synchronous_commit = off")
            start = time.perf_counter()
            await load(conn, prefix, Shape(finished, future))
            await extra_rows(conn, prefix)
            print(f"loaded {finished:,} + {future:,} rows in {time.perf_counter() - start:.0f} s")
            now = await conn.fetchval("SELECT now()")
            results = [await explain(conn, prefix, c) for c in cases(now)]
        finally:
            await conn.close()
    lines = ["| statement | indexes | seq scans | rows filtered out | buffers | ms |",
             "|---|---|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['case'].label} (`{r['case'].name}`) | "
                     f"{', '.join(r['indexes']) or '—'} | {', '.join(r['seq']) or 'none'} | "
                     f"{r['filtered']:,} | {r['buffers']:,} | {r['ms']:.2f} |")
    body = "\n".join(lines) + "\n\n" + "\n\n".join(
        f"### {r['case'].label}\n\n```\n{r['plan']}\n```" for r in results)
    print("\n".join(lines))
    return body + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--future", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/dashboard-explain.md"))
    ns = parser.parse_args()
    ns.out.write_text(asyncio.run(main(ns.dsn, ns.finished, ns.future)),
                      encoding="utf-8")
    print(f"plans: {ns.out}")
