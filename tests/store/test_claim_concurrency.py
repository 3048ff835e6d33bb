"""Rule 2 under real concurrency (PostgreSQL only): SKIP LOCKED claimers never
share a job at one epoch."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from uuid import UUID

from tests.helpers import new_job
from venturi.store.base import ClaimRequest
from venturi.store.postgres import PostgresStore

TOTAL = 5_000
LEASES = {"k": dt.timedelta(minutes=5)}


async def test_concurrent_claimers_never_share_a_job(pg_store: PostgresStore, pg_dsn: str) -> None:
    await pg_store.enqueue([new_job(priority=i % 3) for i in range(TOTAL)])
    # Two claimers (worker identities), each with its own pool of 4: 8 connections in all,
    # each connection looping claims concurrently, with reserved slots in every batch.
    claimers = [
        await PostgresStore.connect(pg_dsn, prefix=pg_store.prefix, min_size=4, max_size=4,
                                    clock=pg_store.clock)
        for _ in range(2)
    ]
    received: list[tuple[UUID, int, str]] = []

    async def loop(store: PostgresStore, name: str) -> None:
        empty = 0
        while len(received) < TOTAL and empty < 200:
            batch = await store.claim(ClaimRequest(name, LEASES, 17, reserve_normal=2,
                                                   reserve_low=2))
            empty = 0 if batch else empty + 1
            received.extend((j.id, j.run_count, j.claimed_by or "") for j in batch)
            await asyncio.sleep(0)

    try:
        await asyncio.wait_for(asyncio.gather(*(
            loop(store, f"claimer{n}/boot") for n, store in enumerate(claimers) for _ in range(4)
        )), timeout=60)
    finally:
        for store in claimers:
            await store.close()

    epochs = Counter((id, run) for id, run, _ in received)
    assert [e for e, n in epochs.items() if n > 1] == []
    assert len(received) == TOTAL and len({id for id, _, _ in received}) == TOTAL
    assert {run for _, run, _ in received} == {1}
    assert {by for _, _, by in received} == {"claimer0/boot", "claimer1/boot"}
    async with pg_store.pool.acquire() as conn:
        rows = await conn.fetch(
            f"SELECT id, claimed_by, run_count FROM {pg_store.prefix}jobs WHERE status='claimed'")
    assert {(r["id"], r["claimed_by"], r["run_count"]) for r in rows} == {
        (id, by, run) for id, run, by in received}
