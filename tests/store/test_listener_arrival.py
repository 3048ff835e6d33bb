"""``Listener.on_arrival``: the hook the worker's waker sets the claimer's event from, in
the LISTEN connection's own callback (venturi/worker/waker.py), for every store that
has a listener (the memory store and PostgreSQL's asyncpg driver)."""

from __future__ import annotations

import asyncio

import pytest

from venturi.notices import Drain, parse_control
from venturi.store.base import Listener, Store
from venturi.store.postgres import PostgresStore
from venturi.testing.builders import add, new_job

from ..conftest import wait_for

pytestmark = pytest.mark.timeout(30)


async def _receive(listener: Listener, timeout: float = 5) -> tuple[str, str]:
    return await asyncio.wait_for(listener.receive(), timeout)


async def test_the_hook_sees_each_arrival_and_what_it_handles_skips_receive(
        store: Store) -> None:
    seen: list[tuple[str, str]] = []

    def hook(label: str, payload: str) -> bool:
        seen.append((label, payload))
        return label == "jobs"  # handled here; control messages go on to receive()

    async with store.listen() as listener:
        listener.on_arrival(hook)
        await add(store, new_job("arrives"))
        await wait_for(lambda: ("jobs", "arrives") in seen, timeout=5,
                       what="the hook to see the wake-up")
        await store.notify_control({"op": "drain", "worker": "w1"})
        label, payload = await _receive(listener)  # not the wake-up: the hook handled it
        assert label == "control" and parse_control(payload) == Drain("w1")
        assert [s[0] for s in seen] == ["jobs", "control"]


async def test_without_a_hook_or_when_it_raises_receive_has_the_notification(
        store: Store) -> None:
    def broken(label: str, payload: str) -> bool:
        raise RuntimeError("a bug in the hook")

    async with store.listen() as listener:
        await add(store, new_job("first"))
        assert await _receive(listener) == ("jobs", "first")
        listener.on_arrival(broken)
        await add(store, new_job("second"))
        assert await _receive(listener) == ("jobs", "second")
        listener.on_arrival(None)
        await add(store, new_job("third"))
        assert await _receive(listener) == ("jobs", "third")


async def test_a_ping_keeps_the_session_reading_listen_and_its_notifications(
        pg_store: PostgresStore) -> None:
    """The waker pings its LISTEN connection after a quiet spell. The ping LISTENs again,
    so the session's query column still says LISTEN (an operator, or a fault test whose
    DSN names every session alike, finds it by that), and what arrives after it is
    still delivered."""
    async with pg_store.listen() as listener:
        await listener.ping()  # type: ignore[attr-defined]
        pid = listener._conn.get_server_pid()  # type: ignore[attr-defined]
        query = await pg_store.pool.fetchval(
            "SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
        assert query.startswith('LISTEN "'), query
        await add(pg_store, new_job("after the ping"))
        assert await _receive(listener) == ("jobs", "after the ping")
