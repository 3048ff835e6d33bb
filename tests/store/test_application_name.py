"""Every session venturi opens names itself in ``pg_stat_activity`` (``venturi <role>``,
venturi/store/_connect.py, ``named``), unless the user named them: the DSN's
``application_name`` or ``PGAPPNAME`` wins (docs/operations/sizing.md, "Connection
pools"). Each test runs on a database of its own, so every session on it is the test's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import asyncpg
import pytest

import venturi
from venturi import Queue, SyncQueue

from ..conftest import fresh_database, wait_for

pytestmark = pytest.mark.timeout(60)


class Noop(venturi.Task, kind="an.noop"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[tuple[str, asyncpg.Connection]]:
    """A fresh database (its DSN) and an observer connection on the server's own one."""
    async with fresh_database(pg_dsn, "venturi_appname") as made:
        yield made


async def names(admin: asyncpg.Connection, dsn: str) -> list[str]:
    rows = await admin.fetch("SELECT application_name FROM pg_stat_activity WHERE datname = $1",
                             urlsplit(dsn).path.lstrip("/"))
    return sorted(r[0] for r in rows)


async def test_a_worker_s_sessions_say_what_they_are(
        db: tuple[str, asyncpg.Connection]) -> None:
    dsn, admin = db
    async with Queue.connect(dsn, prefix="an_") as queue:
        await queue.migrate()
        worker = venturi.Worker(queue, tasks=[Noop], concurrency=4, name="an-host:1")
        running = asyncio.create_task(worker.run())
        try:
            await wait_for(lambda: worker.health.ready, what="the worker to be ready")
            await queue.enqueue(Noop())
            expected = {"venturi pool", "venturi claim", "venturi listen",
                        "venturi lock an-host:1"}
            await wait_for(lambda: _has(admin, dsn, expected), what=f"sessions {expected}")
            seen = set(await names(admin, dsn))
            assert seen <= expected | {"venturi maintenance"}, seen
        finally:
            await worker.drain(grace=0)
            await running


async def _has(admin: asyncpg.Connection, dsn: str, expected: set[str]) -> bool:
    return expected <= set(await names(admin, dsn))


async def test_a_name_the_user_gives_wins(db: tuple[str, asyncpg.Connection],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    dsn, admin = db
    sep = "&" if urlsplit(dsn).query else "?"
    async with Queue.connect(f"{dsn}{sep}application_name=billing", prefix="an_") as queue:
        await queue.migrate()
        assert set(await names(admin, dsn)) == {"billing"}
    monkeypatch.setenv("PGAPPNAME", "reports")
    async with Queue.connect(dsn, prefix="an_") as queue:
        await queue.enqueue(Noop())
        assert set(await names(admin, dsn)) == {"reports"}
    with SyncQueue.connect(dsn, prefix="an_") as sync_queue:  # psycopg: libpq reads PGAPPNAME
        sync_queue.enqueue(Noop())
        assert set(await names(admin, dsn)) == {"reports"}


async def test_a_sync_producer_s_sessions_are_named(db: tuple[str, asyncpg.Connection]) -> None:
    dsn, admin = db
    async with Queue.connect(dsn, prefix="an_") as queue:
        await queue.migrate()
    with SyncQueue.connect(dsn, prefix="an_") as sync_queue:
        sync_queue.enqueue(Noop())
        assert set(await names(admin, dsn)) == {"venturi pool"}
