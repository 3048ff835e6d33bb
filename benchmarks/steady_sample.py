"""What the steady-state benchmark (``benchmarks/steady.py``) samples, every few
seconds of the run: table and index sizes, dead tuples, the backlog, worker RSS, the
oldest transaction, wait events, and optionally one tier's claim plan and the
statements' cost (``pg_stat_statements``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import asyncpg

from .steady_tasks import KIND
from .workers import WorkerProc

TABLES = ("jobs", "journal")


@dataclass
class Sample:
    t: float  # seconds since the producer started
    sent: int
    size_kib: dict[str, int]  # total relation size (heap, indexes, TOAST)
    claim_index_kib: int
    dead: dict[str, int]
    live: dict[str, int]
    autovacuums: dict[str, int]
    vacuums: dict[str, int]
    updates: tuple[int, int]  # jobs: n_tup_upd, n_tup_hot_upd
    pending: int
    claimed: int
    rss_kib: list[int | None]
    load1: float
    horizon_age: float | None  # seconds: the oldest snapshot another session holds
    horizon_who: str | None  # that session, when it was older than a few seconds
    waits: dict[str, int]  # wait events of the active backends
    explain: dict[str, Any] | None = None
    statements: dict[str, tuple[int, float, int, int]] | None = None  # calls, ms, blocks, rows


_STATS = """
SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, vacuum_count, n_tup_upd,
       n_tup_hot_upd, pg_total_relation_size(relid) / 1024 AS size_kib
FROM pg_stat_user_tables WHERE relname = ANY($1::text[])
"""
_HORIZON = """
SELECT extract(epoch FROM now() - xact_start) AS age,
       format('pid %s %s (%s): %s', pid, coalesce(state, '-'), application_name,
              left(query, 60)) AS who
FROM pg_stat_activity
WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid() AND backend_type = 'client backend'
ORDER BY xact_start LIMIT 1
"""
_WAITS = """
SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*) FROM pg_stat_activity
WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
GROUP BY 1
"""
# One tier's claim scan, as the claim statement's ``normal`` CTE runs it.
_TIER_SCAN = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id, visible_at FROM {p}jobs
WHERE status = 'pending' AND priority = 1 AND visible_at <= now() AND kind = ANY($1::text[])
ORDER BY visible_at, id LIMIT 10 FOR UPDATE SKIP LOCKED
"""


async def _explain(conn: asyncpg.Connection, prefix: str) -> dict[str, Any]:
    tr = conn.transaction()
    await tr.start()
    try:
        raw = await conn.fetchval(_TIER_SCAN.format(p=prefix), [KIND])
    finally:
        await tr.rollback()  # the rows it locked go back at once
    plan = json.loads(raw)[0]
    node = plan["Plan"]
    while node.get("Plans") and "Index Name" not in node:
        node = node["Plans"][0]
    top = plan["Plan"]
    return {"ms": plan["Execution Time"],
            "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
            "rows": top.get("Actual Rows", 0), "node": node.get("Node Type"),
            "index": node.get("Index Name")}


async def sample(conn: asyncpg.Connection, prefix: str, t: float, sent: int,
                 procs: list[WorkerProc], *, explain: bool = False,
                 statements: bool = False) -> Sample:
    names = {f"{prefix}{t}": t for t in TABLES}
    rows = {names[r["relname"]]: r for r in await conn.fetch(_STATS, list(names))}
    horizon = await conn.fetchrow(_HORIZON)
    age = None if horizon is None or horizon["age"] is None else float(horizon["age"])
    waits = {w: n for w, n in await conn.fetch(_WAITS)}
    async with conn.transaction():
        # Counted from the partial indexes: a sequential scan of the whole table every
        # sample (the planner's pick once statistics see thousands of claimed rows)
        # would be load of the driver's own.
        await conn.execute("SET LOCAL enable_seqscan = off")
        pending = await conn.fetchval(
            f"SELECT count(*) FROM {prefix}jobs WHERE status = 'pending'")
        claimed = await conn.fetchval(
            f"SELECT count(*) FROM {prefix}jobs WHERE status = 'claimed'")
    claim_index = await conn.fetchval("SELECT pg_relation_size($1::regclass) / 1024",
                                      f"{prefix}jobs_claim")
    return Sample(
        t=t, sent=sent,
        size_kib={k: r["size_kib"] for k, r in rows.items()}, claim_index_kib=claim_index,
        dead={k: r["n_dead_tup"] for k, r in rows.items()},
        live={k: r["n_live_tup"] for k, r in rows.items()},
        autovacuums={k: r["autovacuum_count"] for k, r in rows.items()},
        vacuums={k: r["vacuum_count"] for k, r in rows.items()},
        updates=(rows["jobs"]["n_tup_upd"], rows["jobs"]["n_tup_hot_upd"]),
        pending=pending, claimed=claimed, rss_kib=[p.rss_kib() for p in procs],
        load1=os.getloadavg()[0],
        horizon_age=age, horizon_who=horizon["who"] if age is not None and age > 5 else None,
        waits=waits,
        explain=await _explain(conn, prefix) if explain else None,
        statements=await _statements(conn, prefix) if statements else None)


def classify(query: str) -> str:
    """Which of the store's statements a pg_stat_statements entry is."""
    if "FOR UPDATE SKIP LOCKED" in query and "claim_expires_at" in query:
        return "claim"
    if "INSERT INTO" in query and "journal" in query and "UPDATE" in query:
        return "settle"
    if "pg_try_advisory_xact_lock" in query and "DELETE" in query:
        return "retention"
    if "INSERT INTO" in query:
        return "enqueue"
    if "claim_expires_at =" in query:
        return "renew"
    return "other"


async def _statements(conn: asyncpg.Connection,
                      prefix: str) -> dict[str, tuple[int, float, int, int]]:
    totals: dict[str, tuple[int, float, int, int]] = {}
    for r in await conn.fetch(
            "SELECT query, calls, total_exec_time, shared_blks_hit + shared_blks_read AS blocks,"
            " rows FROM pg_stat_statements WHERE strpos(query, $1) > 0", f"{prefix}jobs"):
        what = classify(r["query"])
        c, ms, b, n = totals.get(what, (0, 0.0, 0, 0))
        totals[what] = (c + r["calls"], ms + r["total_exec_time"], b + r["blocks"], n + r["rows"])
    return totals


