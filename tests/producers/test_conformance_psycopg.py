"""The shipped conformance suite (venturi.testing) against PostgresStore on the
blocking psycopg driver, SyncQueue's store: every statement the suite sends goes
through psycopg (its placeholders, its adaptation of every parameter, its rows).

The suite's async tests await the store's coroutines, which finish without
suspending. Only LISTEN, which the suite uses to observe the wake-ups the
statements send, is a worker's session and so asyncpg's (the psycopg driver
serves producers): it observes, on a connection of its own, what psycopg sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from tests.conftest import drop_prefix
from venturi import ManualClock
from venturi.store.base import Listener
from venturi.store.postgres import AsyncpgListener, PostgresStore, channels
from venturi.store.postgres.driver import results_channel
from venturi.store.postgres.psycopg_driver import PsycopgDriver
from venturi.testing.fixtures import StoreFactory
from venturi.testing.suite import *  # noqa: F403


class PsycopgStore(PostgresStore):
    """PostgresStore on the psycopg driver, observed by an asyncpg LISTEN."""

    dsn_for_listen: str

    def listen(self) -> Listener:
        return AsyncpgListener(self.dsn_for_listen, self.prefix, channels(self.prefix))

    def listen_finished(self) -> Listener:
        return AsyncpgListener(self.dsn_for_listen, self.prefix, results_channel(self.prefix))


@contextlib.asynccontextmanager
async def _psycopg_store(dsn: str, prefix: str,
                         clock: ManualClock) -> AsyncIterator[PostgresStore]:
    driver, schema = PsycopgDriver.connect(dsn, prefix=prefix, min_size=1, max_size=4,
                                           connect_timeout=10)
    store = PsycopgStore(driver, prefix=prefix, clock=clock, schema=schema)
    store.dsn_for_listen = dsn
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()
        await drop_prefix(dsn, prefix)


@pytest.fixture
def store_factory(pg_dsn: str, prefix: str) -> StoreFactory:
    return lambda clock: _psycopg_store(pg_dsn, prefix, clock)
