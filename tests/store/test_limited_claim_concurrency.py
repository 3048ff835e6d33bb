"""Limits under real concurrency (PostgreSQL only, docs/concepts/flow-control.md): eight
connections of two claimer identities claim one limited kind at once, nothing settles,
and exactly the limit is claimed, whether a claim took the fast path (claim_limited_fast)
or the full one (lock_kinds, claim_limited)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from typing import Any

import pytest

from tests.helpers import new_job
from venturi.store.base import ClaimRequest
from venturi.store.flow import Limits, Rate
from venturi.store.postgres import PostgresStore

LEASES = {"k": dt.timedelta(minutes=5)}


async def _claim_all(pg_store: PostgresStore, pg_dsn: str) -> tuple[int, Counter[str]]:
    """Every connection claims batches of 7 until 50 claims in a row come back empty:
    the jobs claimed, and the statements that claimed them."""
    claimers = [
        await PostgresStore.connect(pg_dsn, prefix=pg_store.prefix, min_size=4, max_size=4,
                                    clock=pg_store.clock)
        for _ in range(2)
    ]
    statements: Counter[str] = Counter()
    received: list[Any] = []

    def spying(store: PostgresStore) -> None:
        fetch = store._fetch

        async def spy(name: str, *args: Any, **kw: Any) -> Any:
            found = await fetch(name, *args, **kw)
            if found and name.startswith("claim_limited"):
                statements[name] += 1
            return found
        store._fetch = spy  # type: ignore[method-assign]

    async def loop(store: PostgresStore, name: str) -> None:
        empty = 0
        while empty < 50:
            got = await store.claim_limited(ClaimRequest(name, LEASES, 7))
            empty = 0 if got.jobs else empty + 1
            received.extend(got.jobs)
            await asyncio.sleep(0)

    for store in claimers:
        spying(store)
    try:
        await asyncio.wait_for(asyncio.gather(*(
            loop(store, f"claimer{n}/boot") for n, store in enumerate(claimers) for _ in range(4)
        )), timeout=60)
    finally:
        for store in claimers:
            await store.close()
    assert len({j.id for j in received}) == len(received)
    async with pg_store.pool.acquire() as conn:
        claimed = await conn.fetchval(
            f"SELECT count(*) FROM {pg_store.prefix}jobs WHERE status = 'claimed'")
    assert claimed == len(received)
    return claimed, statements


@pytest.mark.parametrize(
    "limits", [Limits(concurrency=60), Limits(rate=Rate(60, dt.timedelta(hours=1)))],
    ids=["concurrency", "rate"])
async def test_concurrent_limited_claims_take_exactly_the_limit(
        pg_store: PostgresStore, pg_dsn: str, limits: Limits) -> None:
    await pg_store.enqueue([new_job(priority=i % 3) for i in range(500)])
    await pg_store.declare_kinds({"k": limits})
    claimed, statements = await _claim_all(pg_store, pg_dsn)
    assert claimed == 60
    assert statements["claim_limited_fast"] > 0, statements  # both paths were taken
    assert statements["claim_limited"] > 0, statements
