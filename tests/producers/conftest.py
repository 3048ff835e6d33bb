"""Fixtures for the producer paths: an asyncio Queue and a SyncQueue on the test's
migrated prefix, and a listener on its jobs channel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from tests.conftest import drop_prefix
from venturi import Queue, SyncQueue
from venturi.store.postgres import PostgresStore


@pytest.fixture
async def pg_queue(pg_dsn: str, prefix: str) -> AsyncIterator[Queue]:
    """An asyncio Queue (asyncpg pool) on the test's migrated prefix, dropped afterwards."""
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, max_size=4)
    await store.migrate()
    try:
        yield Queue(store)
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)


@pytest.fixture
def sync_queue(pg_dsn: str, prefix: str) -> Iterator[SyncQueue]:
    """A SyncQueue (psycopg pool) on the test's migrated prefix, dropped afterwards."""
    try:
        with SyncQueue.connect(pg_dsn, prefix=prefix, max_size=8) as queue:
            queue.migrate()
            yield queue
    finally:
        asyncio.run(drop_prefix(pg_dsn, prefix))


class Notices:
    """What arrives on ``{prefix}jobs``, in order, on a LISTEN connection of its own."""

    def __init__(self, dsn: str, prefix: str) -> None:
        self.dsn, self.channel = dsn, f"{prefix}jobs"
        self.received: asyncio.Queue[str] = asyncio.Queue()

    async def upto_marker(self) -> list[str]:
        """Everything notified before now: send a marker, collect what came before it."""
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute("SELECT pg_notify($1, 'marker')", self.channel)
        finally:
            await conn.close()
        seen = []
        while (item := await asyncio.wait_for(self.received.get(), timeout=10)) != "marker":
            seen.append(item)
        return seen


@pytest.fixture
async def notices(pg_dsn: str, prefix: str) -> AsyncIterator[Notices]:
    found = Notices(pg_dsn, prefix)
    conn = await asyncpg.connect(pg_dsn)
    await conn.add_listener(found.channel, lambda *args: found.received.put_nowait(args[3]))
    try:
        yield found
    finally:
        await conn.close()
