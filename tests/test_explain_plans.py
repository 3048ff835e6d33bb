"""The hot statements stay index-driven on a moderately large table.

The full-size evidence (1,000,000 finished rows) is docs/explain-plans.md,
from ``python -m benchmarks explain``; this is the same loader at 20,000
finished and 2,000 future rows, large enough that the planner would rather
scan the table if an index did not fit the statement. Besides the statements
that page explains, every statement that shares a fragment with one of them
(venturi/store/_sql.py) is held to its index here too.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from benchmarks.explain import Explained, Shape, Statement, explain, load, statements
from venturi.notices import CANCEL_CHUNK
from venturi.store.lifecycle import REDRIVE_NOTE, Recovery
from venturi.store.postgres import PostgresStore


def shared_fragments() -> list[Statement]:
    """The statements that share a fragment with an explained one (recovery, redrive,
    cancel, retention, the job columns), with realistic parameters."""
    ids = [uuid.uuid4() for _ in range(100)]
    week_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
    return [
        Statement("recover", "the reaper taking one expired lease back",
                  (Recovery.LEASE_EXPIRED.value, ids[0], 1), ("jobs_pkey",)),
        Statement("recover_boot", "a restarted worker taking its earlier boot's claims back",
                  (Recovery.WORKER_RESTARTED.value, "gone", "gone/boot2"),
                  ("jobs_expiry|jobs_claimed_kind",)),
        Statement("retry_ids", "redriving 100 dead jobs by id", (REDRIVE_NOTE, ids),
                  ("jobs_pkey",)),
        Statement("retry_kind", "redriving the dead jobs of one kind", (REDRIVE_NOTE, "embed"),
                  ("jobs_dead",)),
        Statement("cancel_ids", "cancelling 100 jobs by id", (ids, CANCEL_CHUNK, None),
                  ("jobs_pkey",)),
        Statement("cancel_subject", "cancelling one directory's subtree",
                  ("file:///bucket/42", CANCEL_CHUNK, None), ("jobs_subject",)),
        Statement("cleanup_exclusive", "retention: one batch under its try-lock",
                  (week_ago, ["completed", "dead"], None, 10_000, "bench"), ("jobs_finished",)),
        Statement("merge_into", "a dedup hit folded into its pending job",
                  (ids[0], json.dumps({"n": 1}), None, False, None, None, dt.timedelta(0),
                   None), ("jobs_pkey",)),
        Statement("job", "one job by id", (ids[0],), ("jobs_pkey",)),
    ]


@pytest.fixture
async def explained(pg_store: PostgresStore, pg_dsn: str) -> AsyncIterator[dict[str, Explained]]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await load(conn, pg_store.prefix, Shape(finished=20_000, future=2_000))
        yield {st.key: await explain(conn, pg_store.prefix, st)
               for st in [*statements(), *shared_fragments()]}
    finally:
        await conn.close()


async def test_claim_and_subject_lookup_use_their_indexes(
    explained: dict[str, Explained],
) -> None:
    claim = explained["claim"]
    assert "jobs_claim" in claim.indexes, claim.plan
    assert not claim.seq_scans, claim.plan
    # Settling and renewing probe the primary key per run: never every claimed row.
    for name in ("settle_completions", "settle_many", "extend_leases"):
        keyed = explained[name]
        assert keyed.indexes == ["jobs_pkey"], (name, keyed.plan)
        assert not keyed.seq_scans, (name, keyed.plan)
    subject = explained["count_subject"]
    assert subject.indexes == ["jobs_subject"], subject.plan
    assert not subject.seq_scans, subject.plan


async def test_every_explained_statement_is_index_driven(
    explained: dict[str, Explained],
) -> None:
    # Joined back to its victims, a cleanup batch hash-joined a sequential scan of
    # the whole table (docs/explain-plans.md): the victims go as an array instead.
    for name in ("cleanup_batch", "cleanup_exclusive"):
        assert "jobs_pkey" in explained[name].indexes, explained[name].plan
    slow = {name: (e.indexes, e.seq_scans) for name, e in explained.items() if not e.index_driven}
    assert not slow


async def test_the_bulk_load_leaves_the_tally_exact_and_its_trigger_on(
    pg_store: PostgresStore, pg_dsn: str,
) -> None:
    # benchmarks/harness.py:bulk_load turns the tally's per-row INSERT trigger off while
    # a fixture loads (1,000,000 finished rows took over 20 minutes row by row), then
    # counts the tally again from the table.
    p = pg_store.prefix
    conn = await asyncpg.connect(pg_dsn)
    finished = (f"INSERT INTO {p}jobs (id, kind, payload, status, finished_at)"
                " VALUES (gen_random_uuid(), 'embed', '{}', 'completed', now())")
    try:
        await conn.execute(finished)  # counted by the trigger, before the load
        await load(conn, p, Shape(finished=2_000, future=100))
        truth = {(r[0], r[1]): r[2] for r in await conn.fetch(
            f"SELECT kind, status, count(*) FROM {p}jobs"
            " WHERE status IN ('completed', 'dead') GROUP BY 1, 2")}
        tally = f"SELECT kind, status, sum(n) FROM {p}tallies GROUP BY 1, 2"
        assert {(r[0], r[1]): r[2] for r in await conn.fetch(tally)} == truth
        assert sum(truth.values()) == 1 + 2_000 + Shape(2_000, 100).dead
        assert await conn.fetchval(
            "SELECT tgenabled::text FROM pg_trigger WHERE tgname = $1",
            f"{p}jobs_tally_insert") == "O"
        await conn.execute(finished)  # and again after it
        truth[("embed", "completed")] += 1
        assert {(r[0], r[1]): r[2] for r in await conn.fetch(tally)} == truth
    finally:
        await conn.close()
