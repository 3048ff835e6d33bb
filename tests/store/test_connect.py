"""Connections that can follow a failover (venturi/store/_connect.py): a multi-host DSN
gives each host its own timeout, and a silent peer ends a connection instead of hanging
it for TCP's quarter of an hour. Loopback only: the silent host is a socket here that
accepts and never answers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from venturi.store import _connect
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for


def test_a_multi_host_dsn_is_split_per_host_keeping_user_database_and_options() -> None:
    dsn = "postgresql://app:pw@db1:5432,db2,[::1]:6432/jobs?target_session_attrs=read-write"
    assert _connect.single_host_dsns(dsn) == [
        "postgresql://app:pw@db1:5432/jobs?target_session_attrs=read-write",
        "postgresql://app:pw@db2/jobs?target_session_attrs=read-write",
        "postgresql://app:pw@[::1]:6432/jobs?target_session_attrs=read-write",
    ]
    assert _connect.single_host_dsns("postgres://db1,db2/x") == ["postgres://db1/x",
                                                                 "postgres://db2/x"]


@pytest.mark.parametrize("dsn", [
    "postgresql://app@db1:5432/jobs",  # one host: asyncpg as it is
    "host=db1,db2 dbname=jobs",  # keyword form
    "postgresql://app@db1,db2/jobs?host=/run/postgresql",  # hosts as parameters
    "postgresql://app@db1,db2/jobs?target_session_attrs=prefer-standby",  # chooses among hosts
    "mysql://db1,db2/x",
])
def test_what_is_not_split_is_left_to_asyncpg(dsn: str) -> None:
    assert _connect.single_host_dsns(dsn) is None


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose server takes connections and never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def _hostport(pg_dsn: str) -> str:
    parts = urlsplit(pg_dsn)
    if parts.scheme not in ("postgres", "postgresql") or not parts.port or "," in parts.netloc:
        pytest.skip("needs a single-host TCP DSN for the test database")
    return f"{parts.hostname}:{parts.port}"


def _multi(pg_dsn: str, first: str) -> str:
    parts = urlsplit(pg_dsn)
    user = parts.netloc.rpartition("@")[0]
    return (f"postgresql://{user}@{first},{_hostport(pg_dsn)}{parts.path}"
            "?target_session_attrs=read-write")


async def test_a_silent_first_host_costs_its_timeout_not_the_connection(
        pg_dsn: str, silent_port: int) -> None:
    dsn = _multi(pg_dsn, f"127.0.0.1:{silent_port}")
    # asyncpg alone: the silent host uses up the whole timeout; the next is never tried.
    with pytest.raises(TimeoutError):
        await asyncpg.connect(dsn, timeout=1)
    began = time.monotonic()
    conn = await _connect.connect(dsn, timeout=1)
    try:
        assert await conn.fetchval("SELECT NOT pg_is_in_recovery()")
        assert 1 <= time.monotonic() - began < 5
    finally:
        await conn.close()


def _bounded(conn: object) -> bool:
    sock = conn._transport.get_extra_info("socket")  # type: ignore[attr-defined]
    return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
                == int(_connect.SILENT_PEER * 1000))


async def test_every_store_connection_bounds_a_silent_peer(pg_dsn: str, prefix: str) -> None:
    _hostport(pg_dsn)
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, max_size=1)
    try:
        async with store.pool.acquire() as pooled:
            assert _bounded(pooled._con)  # type: ignore[attr-defined]
        async with store.listen() as listener:
            assert _bounded(listener._conn)  # type: ignore[attr-defined]
        async with store.identity_lock("bounded") as lock:
            assert await lock.acquire()
            assert _bounded(lock._conn)  # type: ignore[attr-defined]
    finally:
        await store.close()


async def test_all_hosts_down_raises_the_last_hosts_error(silent_port: int) -> None:
    with socket.socket() as s:  # a port nobody listens on: refused at once
        s.bind(("127.0.0.1", 0))
        refused = s.getsockname()[1]
    with pytest.raises(OSError):
        await _connect.connect(
            f"postgresql://root@127.0.0.1:{silent_port},127.0.0.1:{refused}/x", timeout=0.5)


async def _unobserved_after_a_cancel(connect: Callable[[str], Awaitable[Any]], dsn: str,
                                     monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Cancel ``connect(dsn)``'s caller at the moment asyncpg's socket is open and not yet
    taken over (its SSL request's protocol just made), and return what asyncio reports
    as left unobserved once the attempt is over."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    callers: list[asyncio.Task[Any]] = []
    made = asyncpg.connect_utils.TLSUpgradeProto.__init__

    def cancel_the_caller(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        if callers:  # once: the connection the test makes, not any made after it
            callers[0].cancel()

    monkeypatch.setattr(asyncpg.connect_utils.TLSUpgradeProto, "__init__", cancel_the_caller)
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("exception"))))
    try:
        callers.append(asyncio.ensure_future(connect(dsn)))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(callers[0]), 10)
        assert callers[0].cancelled()
        callers.clear()  # its CancelledError's frames hold asyncpg's protocol, and the future

        def collected() -> bool:
            gc.collect()
            return bool(reported)

        if connect is asyncpg.connect:  # asyncpg alone: its future fails unobserved
            await wait_for(collected, what="asyncio to report the unobserved future")
        else:  # the attempt goes on to its end; then nothing may be reported
            await wait_for(lambda: not _connect._abandoned, what="the attempt to end")
            for _ in range(5):  # the closed connection's callbacks, then the collector
                await asyncio.sleep(0.01)
                collected()
    finally:
        loop.set_exception_handler(before)
    return reported


async def test_a_connect_cancelled_as_its_socket_opens_leaves_nothing_unobserved(
        pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncpg cancelled between opening the socket and taking it over leaves its SSL
    request's future to fail unseen ("Future exception was never retrieved:
    ConnectionError('unexpected connection_lost() call')", printed as a worker stopped
    before its LISTEN session had connected)."""
    if "sslmode=disable" in pg_dsn:
        pytest.skip("no SSL request is made: nothing to cancel it in")
    _hostport(pg_dsn)
    assert any("connection_lost" in r for r in
               await _unobserved_after_a_cancel(asyncpg.connect, pg_dsn, monkeypatch)), \
        "asyncpg no longer leaves the future: this test no longer proves anything"
    assert await _unobserved_after_a_cancel(_connect.connect, pg_dsn, monkeypatch) == []
    assert not _connect._abandoned
