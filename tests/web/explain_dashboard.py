"""EXPLAIN (ANALYZE, BUFFERS) of what the dashboard asks the database, at
1,000,000 finished + 100,000 scheduled rows (benchmarks/explain.py's table).

``python -m tests.web.explain_dashboard [--finished N] [--future N]`` prints one
line per statement and writes every plan to ``--out`` (default
/tmp/dashboard-explain.md). It covers the store statements the pages issue
today and the statements docs/operations/dashboard.md proposes for the store.
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
from venturi.store import _sql
from venturi.web.filters import uuid7_floor

_INDEX = re.compile(r"(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)?"
                    r"(?: using| on) ([\w{}]+)")
_SEQ = re.compile(r"Seq Scan on ([\w{}]+)")
_TIME = re.compile(r"Execution Time: ([\d.]+) ms")
_ROWS = re.compile(r"Rows Removed by Filter: (\d+)")

# What docs/operations/dashboard.md asks the store for. {p} is the table prefix.
PROPOSED = {
    "history_between": """
        SELECT id, kind, status, subject, created_at FROM {p}jobs
        WHERE id < $1::uuid AND id >= $2::uuid
          AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR status = $4)
        ORDER BY id DESC LIMIT $5""",
    "history_subject": """
        SELECT id, kind, status, subject, created_at FROM {p}jobs
        WHERE (subject COLLATE "C" = $1
               OR (subject COLLATE "C" >= $1 || '/' AND subject COLLATE "C" < $1 || '0'))
          AND id < coalesce($2::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
          AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR status = $4)
        ORDER BY id DESC LIMIT $5""",
    "history_dead": """
        SELECT id, kind, subject, finished_at FROM {p}jobs
        WHERE status = 'dead' AND ($1::text IS NULL OR kind = $1)
          AND (finished_at, id) < ($2::timestamptz, $3::uuid)
        ORDER BY finished_at DESC, id DESC LIMIT $4""",
    "history_claimed": """
        SELECT id, kind, claimed_by, claim_expires_at FROM {p}jobs
        WHERE status = 'claimed' AND ($1::text IS NULL OR kind = $1)
          AND (claim_expires_at, id) > ($2::timestamptz, $3::uuid)
        ORDER BY claim_expires_at, id LIMIT $4""",
    "throughput_by_minute": """
        SELECT date_bin('1 minute', finished_at, $1::timestamptz) AS minute,
               count(*) FILTER (WHERE status = 'completed') AS completed,
               count(*) FILTER (WHERE status = 'dead') AS dead
        FROM {p}jobs WHERE finished_at >= $1::timestamptz
        GROUP BY 1 ORDER BY 1""",
    "periodic_occurrences": """
        SELECT kind, id, status, visible_at, run_count, failure_count FROM {p}jobs
        WHERE periodic AND status IN ('pending', 'claimed')""",
    "count_between": """
        SELECT count(*) FROM (
            SELECT 1 FROM {p}jobs
            WHERE id < $1::uuid AND id >= $2::uuid
              AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR status = $4)
            LIMIT $5) AS capped""",
}


@dataclass
class Case:
    label: str
    name: str  # a postgres.sql block, or a PROPOSED key
    args: tuple[Any, ...]


def cases(now: dt.datetime) -> list[Case]:
    hour_ago, ten_days = now - dt.timedelta(hours=1), now - dt.timedelta(days=10)
    every = ["pending", "claimed", "completed", "dead"]
    return [
        Case("stats: active jobs by kind", "stats_active", ()),
        Case("stats: dead by kind", "stats_dead", ()),
        Case("stats: finished count", "stats_finished", ()),
        Case("overview: latest 10 dead", "detail_failed", (10,)),
        Case("jobs: first page, no filter", "query_jobs", (None, None, None, None, None, 51)),
        Case("jobs: kind=embed", "query_jobs", ("embed", None, None, None, None, 51)),
        Case("jobs: status=dead", "query_jobs", (None, "dead", None, None, None, 51)),
        Case("jobs: rare kind, claimed, LIMIT 51 (uncapped)", "query_jobs",
             ("rare", "claimed", None, None, None, 51)),
        Case("jobs: rare kind, claimed, LIMIT 5 (capped by the stats' count)", "query_jobs",
             ("rare", "claimed", None, None, None, 5)),
        Case("jobs: created before 10 days ago (cursor from the time)", "query_jobs",
             (None, None, None, None, uuid7_floor(ten_days), 51)),
        Case("jobs: subject total", "count_subject", ("file:///bucket/42", None, every)),
        Case("periodic: next run via history (kind, pending, LIMIT 1)", "query_jobs",
             ("rare", "pending", None, None, None, 1)),
        Case("proposed: created in the last hour", "history_between",
             (uuid7_floor(now), uuid7_floor(hour_ago), None, "completed", 51)),
        Case("proposed: subject subtree, keyset", "history_subject",
             ("file:///bucket/42", None, None, None, 51)),
        Case("proposed: dead jobs, keyset on the dead index", "history_dead",
             (None, now, uuid.UUID(int=2**128 - 1), 51)),
        Case("proposed: claimed jobs, keyset on the expiry index", "history_claimed",
             ("rare", now - dt.timedelta(days=3650), uuid.UUID(int=0), 51)),
        Case("proposed: throughput per minute, last hour", "throughput_by_minute", (hour_ago,)),
        Case("proposed: periodic occurrences", "periodic_occurrences", ()),
        Case("proposed: count created in the last hour, capped at 10,001", "count_between",
             (uuid7_floor(now), uuid7_floor(hour_ago), None, None, 10_001)),
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
    if case.name in PROPOSED:
        sql, args = PROPOSED[case.name].format(p=prefix), case.args
    else:
        query = _sql.queries(prefix)[case.name]
        sql, args = query.sql, ((None, *case.args) if query.uses_now else case.args)
    rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args)
    plan = "\n".join(r[0] for r in rows).replace(prefix, "{prefix}")
    found = _TIME.search(plan)
    return {"case": case, "plan": plan, "ms": float(found.group(1)) if found else float("nan"),
            "indexes": list(dict.fromkeys(i.replace("{prefix}", "")
                                          for i in _INDEX.findall(plan))),
            "seq": [s.replace("{prefix}", "") for s in _SEQ.findall(plan)],
            "filtered": sum(int(n) for n in _ROWS.findall(plan))}


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
    lines = ["| statement | indexes | seq scans | rows filtered out | ms |",
             "|---|---|---|---:|---:|"]
    for r in results:
        lines.append(f"| {r['case'].label} (`{r['case'].name}`) | "
                     f"{', '.join(r['indexes']) or '—'} | {', '.join(r['seq']) or 'none'} | "
                     f"{r['filtered']:,} | {r['ms']:.2f} |")
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
