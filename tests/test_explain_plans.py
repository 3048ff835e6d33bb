"""The hot statements stay index-driven on a moderately large table.

The full-size evidence (1,000,000 finished rows) is docs/explain-plans.md,
from ``python -m benchmarks explain``; this is the same loader at 20,000
finished and 2,000 future rows, large enough that the planner would rather
scan the table if an index did not fit the statement.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from benchmarks.explain import Explained, Shape, explain, load, statements
from venturi.store.postgres import PostgresStore


@pytest.fixture
async def explained(pg_store: PostgresStore, pg_dsn: str) -> AsyncIterator[dict[str, Explained]]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await load(conn, pg_store.prefix, Shape(finished=20_000, future=2_000))
        yield {st.name: await explain(conn, pg_store.prefix, st) for st in statements()}
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
    # cleanup_batch used to hash-join a sequential scan of the whole table.
    assert "jobs_pkey" in explained["cleanup_batch"].indexes
    slow = {name: (e.indexes, e.seq_scans) for name, e in explained.items() if not e.index_driven}
    assert not slow
