"""EXPLAIN (ANALYZE, BUFFERS) of the hot statements on a large, realistic table.

``python -m benchmarks explain`` builds a throwaway prefix holding 1,000,000
completed jobs and 100,000 scheduled in the future, plus the few thousand rows
the statements are actually after (runnable, claimed with expired leases,
dead, with dedup keys and subjects), ANALYZEs it, and explains each named
statement of ``venturi/store/postgres/*.sql`` with realistic parameters. Writes
that change rows run inside a transaction that is rolled back.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from venturi._ids import uuid7_floor
from venturi.store import _sql
from venturi.store.lifecycle import Recovery
from venturi.store.postgres.driver import CACHED_PLAN_SETTINGS

from .harness import bulk_load, fresh_prefix
from .report import environment

KINDS = ["embed", "summarize", "thumbnail", "index"]
LEASE = dt.timedelta(seconds=30)

# id: a UUIDv7 built from the row's creation time, so ids sort like venturi's;
# the insert's tag and the row number keep them unique within one millisecond.
_ROW = """
    (lpad(to_hex((extract(epoch FROM {ts}) * 1000)::bigint), 12, '0') || '7{tag}8'
     || lpad(to_hex(g), 15, '0'))::uuid
"""


@dataclass(frozen=True)
class Shape:
    """How many rows of each sort the table holds."""

    finished: int
    future: int

    def extra(self, full: int, least: int) -> int:
        """A row count that is ``full`` at 1,000,000 finished rows, scaled down to ``least``."""
        return max(least, full * self.finished // 1_000_000)

    @property
    def runnable(self) -> int:
        return self.extra(3_000, 300)

    @property
    def expired(self) -> int:
        return self.extra(500, 50)

    @property
    def leased(self) -> int:
        return self.extra(200, 20)

    @property
    def dead(self) -> int:
        return self.extra(2_000, 100)

    @property
    def dedup(self) -> int:
        return self.extra(1_000, 100)


def _id(ts: str, tag: str) -> str:
    return _ROW.format(ts=ts, tag=tag)


def _subject(expr: str) -> str:
    # 1,000 jobs per directory: a subtree lookup of one directory is selective.
    return f"'file:///bucket/' || ({expr}) / 1000 || '/' || ({expr})"


async def load(conn: asyncpg.Connection, prefix: str, shape: Shape) -> dict[str, float]:
    """Fill ``{prefix}jobs`` and its journal; returns the seconds each step took."""
    steps: dict[str, float] = {}

    async def step(name: str, sql: str, *args: Any) -> None:
        start = time.perf_counter()
        await conn.execute(sql, *args)
        steps[name] = time.perf_counter() - start

    jobs = f"{prefix}jobs"
    cols = ("id, kind, payload, priority, status, created_at, visible_at, claim_expires_at, "
            "claimed_by, finished_at, run_count, failure_count, dedup_key, subject")
    kind = "(ARRAY['embed','summarize','thumbnail','index'])[1 + g % 4]"
    async with bulk_load(conn, prefix):
        # Finished over the last 30 days, every one with a subject.
        await step("finished", f"""
            INSERT INTO {jobs} ({cols})
            SELECT {_id('t.ts', 'c00')}, {kind}, jsonb_build_object('n', g), g % 3, 'completed',
                   t.ts, t.ts, NULL, NULL, t.ts + interval '2 seconds', 1, 0, NULL,
                   {_subject('g')}
            FROM generate_series(1, $1::int) AS g,
                 LATERAL (SELECT now() - interval '30 days'
                                 + (g * (interval '30 days' / $1::int)) AS ts) AS t
        """, shape.finished)
        # Scheduled for the next days; a quarter with subjects.
        await step("future", f"""
            INSERT INTO {jobs} ({cols})
            SELECT {_id('now()', 'f00')}, {kind}, jsonb_build_object('n', g), g % 3, 'pending',
                   now(), now() + interval '1 hour' + g * interval '3 seconds', NULL, NULL,
                   NULL, 0, 0, NULL,
                   CASE WHEN g % 4 = 0 THEN {_subject('2000000 + g')} END
            FROM generate_series(1, $1::int) AS g
        """, shape.future)
        # Runnable now, in every tier; some with dedup keys, a third with subjects.
        await step("runnable", f"""
            INSERT INTO {jobs} ({cols})
            SELECT {_id("now() - g * interval '10 ms'", 'a00')}, {kind}, jsonb_build_object('n', g),
                   g % 3, 'pending', now() - g * interval '10 ms',
                   now() - g * interval '10 ms', NULL, NULL, NULL, 0, 0,
                   CASE WHEN g <= $2 THEN 'key-' || g END,
                   CASE WHEN g % 3 = 0 THEN {_subject('3000000 + g')} END
            FROM generate_series(1, $1::int) AS g
        """, shape.runnable, shape.dedup)
        # Claimed: some leases expired (a crashed worker), some live.
        await step("claimed", f"""
            INSERT INTO {jobs} ({cols})
            SELECT {_id("now() - interval '5 minutes'", 'b00')}, {kind}, jsonb_build_object('n', g),
                   1, 'claimed', now() - interval '5 minutes', now() - interval '5 minutes',
                   CASE WHEN g <= $1 THEN now() - g * interval '1 second'
                        ELSE now() + interval '30 seconds' END,
                   CASE WHEN g <= $1 THEN 'gone/boot1' ELSE 'alive/boot2' END,
                   NULL, 1, 0, NULL, NULL
            FROM generate_series(1, $1::int + $2::int) AS g
        """, shape.expired, shape.leased)
        # Dead, each with the journal entry detail_failed reads its reason from.
        await step("dead", f"""
            WITH d AS (
                INSERT INTO {jobs} ({cols})
                SELECT {_id("now() - g * interval '1 minute'", 'd00')}, {kind},
                       jsonb_build_object('n', g), 1, 'dead',
                       now() - g * interval '1 minute', now() - g * interval '1 minute', NULL,
                       NULL, now() - g * interval '1 minute', 3, 3, NULL, NULL
                FROM generate_series(1, $1::int) AS g
                RETURNING id, kind
            )
            INSERT INTO {prefix}journal (job_id, kind, run_no, outcome, note)
            SELECT id, kind, 3, 'dead', 'unsupported-format' FROM d
        """, shape.dead)
        # Every finished run is journaled: cleanup's journal trigger and detail's
        # lookups meet a journal as large as the table.
        await step("journal", f"""
            INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome)
            SELECT id, kind, 1, finished_at, 'completed' FROM {jobs} WHERE status = 'completed'
        """)
    await step("analyze", f"ANALYZE {jobs}, {prefix}journal")
    return steps


@dataclass(frozen=True)
class Statement:
    name: str  # a named statement of venturi/store/postgres/*.sql
    why: str
    args: tuple[Any, ...]  # bind parameters after the clock ($1) when the block uses {now}
    # Index names (without the prefix) the plan must use; "a|b": either of them (two
    # partial indexes of the claimed rows serve a count of them alike).
    expect: tuple[str, ...]
    case: str = ""  # tells apart two explained uses of one statement
    setup: str = ""  # SQL run first in the statement's rolled-back transaction ({prefix})

    @property
    def key(self) -> str:
        return f"{self.name}:{self.case}" if self.case else self.name


def statements() -> list[Statement]:
    week_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
    every = ["pending", "claimed", "completed", "dead"]
    ids = [uuid.uuid4() for _ in range(1000)]  # a full settle batch; the plan is the point
    return [
        Statement("claim", "a worker taking up to 100 jobs of four kinds (10 slots reserved "
                  "for tier 1, 5 for tier 2)",
                  (KINDS, [LEASE] * 4, 100, 10, 5, "bench-worker/boot"), ("jobs_claim",)),
        Statement("claim_limited", "a worker taking up to 100 jobs of two limited kinds "
                  "(concurrency 500; 1,000 a minute), under lock_kinds",
                  (KINDS[:2], [LEASE] * 2, 100, 10, 5, "bench-worker/boot"),
                  ("jobs_claim", "jobs_claimed_kind"),
                  setup="INSERT INTO {prefix}kinds (kind, code_concurrency, code_rate_count,"
                        " code_rate_period) VALUES ('embed', 500, NULL, NULL),"
                        " ('summarize', NULL, 1000, interval '1 minute')"),
        Statement("claim_limited_fast", "the same claim while both kinds have room for the "
                  "batch (its fast path: one statement, its turn taken on the kinds' rows)",
                  (KINDS[:2], [LEASE] * 2, 100, 10, 5, "bench-worker/boot"),
                  ("jobs_claim", "jobs_claimed_kind"),
                  setup="INSERT INTO {prefix}kinds (kind, code_concurrency, code_rate_count,"
                        " code_rate_period) VALUES ('embed', 500, NULL, NULL),"
                        " ('summarize', NULL, 1000, interval '1 minute')"),
        Statement("settle_completions", "a worker settling a batch of 1,000 completed runs",
                  ("alive/boot2", ids, json.dumps({str(i): [1, None, None] for i in ids})),
                  ("jobs_pkey",)),
        Statement("settle_many", "a worker settling 1,000 runs of mixed outcomes",
                  ("alive/boot2", ids, json.dumps({
                      str(i): [1, ("complete", "fail")[n % 2], None, None, 5_000_000, False,
                               None, None, None] for n, i in enumerate(ids)})), ("jobs_pkey",)),
        Statement("extend_leases", "a worker renewing the leases of its 1,000 runs",
                  ("alive/boot2", ids, json.dumps({str(i): [1, 30_000_000] for i in ids})),
                  ("jobs_pkey",)),
        Statement("find_stale", "the reaper looking for expired leases", (1000,),
                  ("jobs_expiry",)),
        Statement("recover_stale", "the reaper taking expired leases back",
                  (Recovery.LEASE_EXPIRED.value, 1000),
                  ("jobs_expiry",)),
        Statement("dedup_candidate", "an enqueue with a dedup key finding its pending sibling",
                  ("embed", "key-4"), ("jobs_dedup",)),
        Statement("cleanup_batch", "retention: one batch of 10,000 jobs finished over a week ago",
                  (week_ago, ["completed", "dead"], None, 10_000), ("jobs_finished",)),
        Statement("count_subject", "count(subject='file:///bucket/42'): one directory's subtree",
                  ("file:///bucket/42", None, every, None, None, None), ("jobs_subject",)),
        Statement("next_visible_at", "an idle worker asking when the next scheduled job is due",
                  (KINDS,), ("jobs_claim",)),
        Statement("detail_failed", "the 20 newest dead jobs with their reasons", (20,),
                  ("jobs_dead", "journal_job")),
        Statement("query_jobs", "history: the first page of 50, newest first",
                  (None, None, None, None, None, 51, None), ("jobs_pkey",)),
        *inspection_statements(),
    ]


def inspection_statements() -> list[Statement]:
    """What Queue.stats(), Queue.count() and the dashboard's pages send."""
    now = dt.datetime.now(dt.UTC)
    hour_ago = now - dt.timedelta(hours=1)
    every = ["pending", "claimed", "completed", "dead"]
    return [
        Statement("stats", "stats(): pending and claimed jobs by kind from their indexes, "
                  "finished ones from the tally", (),
                  ("jobs_claim", "jobs_expiry|jobs_claimed_kind")),
        Statement("count_status", "count(): every job, by status", (None, every),
                  ("jobs_claim", "jobs_expiry|jobs_claimed_kind"), case="all"),
        Statement("count_status", "count(kind='embed', statuses=['completed'])",
                  ("embed", ["completed"]), (), case="completed"),
        Statement("count_between", "count(created_since=an hour ago, at_most=10,001)",
                  (None, every, uuid7_floor(hour_ago), None, 10_001), ("jobs_pkey",)),
        Statement("query_jobs", "history(created_since=an hour ago, status='completed')",
                  (None, "completed", None, None, None, 51, uuid7_floor(hour_ago)),
                  ("jobs_pkey",), case="created"),
        Statement("query_jobs_subject", "history(subject='file:///bucket/42'): newest first",
                  ("file:///bucket/42", None, None, None, None, None, None, 51),
                  ("jobs_subject",)),
        Statement("dead_jobs", "dead_jobs(): the first page, most recently dead first",
                  (None, None, None, None, None, 51), ("jobs_dead",)),
        Statement("dead_jobs", "dead_jobs(): a page deep in the dead jobs",
                  (None, now - dt.timedelta(hours=20), uuid.UUID(int=0), None, None, 51),
                  ("jobs_dead",), case="deep"),
        Statement("claimed_jobs", "claimed_jobs(kind='embed'): soonest lease expiry first",
                  ("embed", None, None, None, None, 51), ("jobs_expiry",)),
        Statement("periodic_jobs", "periodic_jobs(): every periodic kind's live occurrence", (),
                  ("jobs_periodic",)),
        Statement("finished_per_minute", "finished per minute over the last hour",
                  (hour_ago, now, 100_000), ("jobs_finished",)),
    ]


_INDEX = re.compile(r"(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)?"
                    r"(?: using| on) ([\w{}]+)")
_SEQ = re.compile(r"Seq Scan on ([\w{}]+)")
# The tables a sequential scan would read whole; the tally is a few rows per kind.
_LARGE = {"jobs", "journal"}
_TIME = re.compile(r"Execution Time: ([\d.]+) ms")


@dataclass
class Explained:
    statement: Statement
    plan: str
    indexes: list[str]
    seq_scans: list[str]
    ms: float

    @property
    def index_driven(self) -> bool:
        return not self.seq_scans and all(
            any(i in self.indexes for i in e.split("|")) for e in self.statement.expect)


async def explain(conn: asyncpg.Connection, prefix: str, st: Statement) -> Explained:
    """EXPLAIN (ANALYZE, BUFFERS) one named statement; its writes are rolled back."""
    query = _sql.queries(prefix)[st.name]
    params: Sequence[Any] = (None, *st.args) if query.uses_now else st.args
    tx = conn.transaction()
    await tx.start()
    try:
        if st.setup:
            await conn.execute(st.setup.replace("{prefix}", prefix))
        if query.cached_plan:
            # As the claim's own sessions run it: one generic plan, with sequential
            # scans and hash and merge joins priced out (venturi/store/postgres/driver.py).
            for name, value in CACHED_PLAN_SETTINGS.items():
                await conn.execute(f"SET LOCAL {name} = {value}")
        rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {query.sql}", *params)
    finally:
        await tx.rollback()
    plan = "\n".join(r[0] for r in rows).replace(prefix, "{prefix}")
    used = list(dict.fromkeys(m.replace("{prefix}", "") for m in _INDEX.findall(plan)))
    seqs = [t for t in (m.replace("{prefix}", "") for m in _SEQ.findall(plan)) if t in _LARGE]
    found = _TIME.search(plan)
    return Explained(st, plan, used, seqs, float(found.group(1)) if found else float("nan"))


def markdown(env: dict[str, Any], shape: Shape, counts: dict[str, int],
             steps: dict[str, float], results: list[Explained]) -> str:
    load_s = sum(steps.values())
    lines = [
        "# EXPLAIN plans of the hot statements",
        "",
        f"Produced by `{env['command']}` on {env['date']} (commit `{env['commit']}`; "
        f"PostgreSQL {env['postgresql']}, {env['nproc']} CPUs, {env['memory']}); do not edit by "
        "hand. Plans are the custom plans PostgreSQL makes for these parameter values, except "
        "for statements marked `-- plan: cached` (the claim and the limited claim's fast "
        "path): theirs is the one generic plan their sessions keep, made with sequential "
        "scans and hash and merge joins priced out (docs/operations/maintenance.md). The "
        "database's own clock (`now()`) is used. Statements that write ran in a transaction "
        "that was rolled back.",
        "",
        "## The table",
        "",
        f"Built with `INSERT ... SELECT generate_series` and ANALYZEd in {load_s:.1f} s ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()) + "):",
        "",
        "| rows | status |",
        "|---:|---|",
    ]
    lines += [f"| {n:,} | {what} |" for what, n in counts.items()]
    lines += [
        "",
        f"Every finished job has a subject (`file:///bucket/<n/1000>/<n>`, 1,000 per "
        f"directory); {shape.dedup:,} runnable jobs carry dedup keys.",
        "",
        "## Summary",
        "",
        "| statement | used for | indexes used | sequential scans | execution time |",
        "|---|---|---|---|---:|",
    ]
    for r in results:
        lines.append(
            f"| `{r.statement.name}` | {r.statement.why} | "
            f"{', '.join(f'`{i}`' for i in r.indexes) or '—'} | "
            f"{', '.join(f'`{s}`' for s in r.seq_scans) or 'none'} | {r.ms:.3f} ms |")
    lines.append("")
    lines += [
        "What this evidence changed: `cleanup_batch` used to join its victims back to the table "
        "(`DELETE ... USING victims`), and at this size the planner hash-joined them against a "
        "sequential scan of all 1,100,000 rows (1.2 s per batch of 10,000, 0.6 s of it the scan). "
        "It now passes them as an array (`id = ANY (ARRAY(SELECT id FROM victims))`), one "
        "primary-key probe each. The settle and renewal statements used to join the claimed "
        "rows to their unnested input, and with the planner's estimate of one claimed row "
        "that became a nested loop rescanning the whole input per row (100 ms for a settle "
        "of 800): each row now reads its input under its id from one jsonb parameter, one "
        "primary-key probe each, as the plans below show for batches of 1,000. The "
        "remaining time of `cleanup_batch` and `recover_stale` is row work: deleting or "
        "updating the rows and, for cleanup, the journal's delete trigger (the `Trigger` "
        "line), which replaced a foreign key (docs/design-notes.md).",
        "",
    ]
    for r in results:
        verdict = "index-driven" if r.index_driven else "**NOT index-driven**"
        lines += [
            f"## `{r.statement.key}`", "",
            f"{r.statement.why[0].upper()}{r.statement.why[1:]}: {verdict}, using "
            f"{', '.join(f'`{i}`' for i in r.indexes) or 'no index'}; "
            f"{r.ms:.3f} ms"
            + (" (its sessions' generic plan)." if _sql.queries("p_")[r.statement.name].cached_plan
               else "."), "",
            "```", r.plan, "```", "",
        ]
    return "\n".join(lines)


def _write(out: Path, text: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")


async def main(dsn: str, out: Path, finished: int, future: int, command: str) -> list[Explained]:
    shape = Shape(finished, future)
    env = await environment(dsn, command)
    async with fresh_prefix(dsn) as prefix:
        conn = await asyncpg.connect(dsn)
        try:
            # Only this loader's session: the rows are thrown away afterwards.
            await conn.execute("SET synchronous_commit = off")
            print(f"loading {finished:,} finished + {future:,} future rows into {prefix}jobs",
                  flush=True)
            steps = await load(conn, prefix, shape)
            counts = {
                f"{status}{' (visible later)' if later else ''}": n
                for status, later, n in await conn.fetch(
                    f"SELECT status, visible_at > now() AND status = 'pending', count(*) "
                    f"FROM {prefix}jobs GROUP BY 1, 2 ORDER BY 1, 2")
            }
            results = [await explain(conn, prefix, st) for st in statements()]
        finally:
            await conn.close()
    _write(out, markdown(env, shape, counts, steps, results))
    for r in results:
        flag = "" if r.index_driven else "   <-- NOT index-driven"
        print(f"  {r.statement.key:<24} {r.ms:9.3f} ms  {', '.join(r.indexes)}{flag}")
    print(f"built in {sum(steps.values()):.1f} s "
          f"({', '.join(f'{k} {v:.1f}' for k, v in steps.items())}); wrote {out}")
    return results
