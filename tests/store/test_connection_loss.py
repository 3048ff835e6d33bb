"""A pool connection left mid-protocol by a terminated server session (asyncpg raises
``InternalClientError``, asyncpg issue 1069; seen in the fault-injection run after a
PostgreSQL restart) is a transient failure, and it is discarded, not handed out again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from tests.conftest import drop_prefix
from tests.tasks import Embed
from venturi import DatabaseUnavailable, Queue
from venturi.store.postgres import PostgresStore


@pytest.fixture
def stuck_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """``stuck_once.append(conn)`` makes that connection's next query fail as asyncpg
    fails on a connection whose protocol state was broken by a lost session."""
    targets: list[Any] = []
    for name in ("execute", "fetch", "fetchval", "fetchrow"):
        original = getattr(asyncpg.connection.Connection, name)

        async def broken(self: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            if self in targets:
                targets.remove(self)
                raise asyncpg.InternalClientError(
                    "cannot switch to state 12; another operation (2) is in progress")
            return await _original(self, *args, **kw)

        monkeypatch.setattr(asyncpg.connection.Connection, name, broken)
    yield targets


async def test_stuck_connection_is_transient_and_discarded(
        pg_dsn: str, prefix: str, stuck_once: list[Any]) -> None:
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, min_size=1, max_size=1)
    queue = Queue(store)
    try:
        await queue.migrate()
        async with store.pool.acquire() as proxy:
            raw = proxy._con
            first_backend = raw.get_server_pid()
        stuck_once.append(raw)
        with pytest.raises(DatabaseUnavailable, match="another operation"):
            await queue.enqueue(Embed(uri="file:///a"))
        # The only pool slot now holds a fresh connection on a new backend.
        await queue.enqueue(Embed(uri="file:///a"))
        async with store.pool.acquire() as proxy:
            assert proxy._con is not raw
            assert proxy._con.get_server_pid() != first_backend
        assert await queue.count(kind="test.embed") == 1
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)
