"""The fixtures the conformance suite's tests take: ``clock``, ``store``, ``queue``.

The suite needs one thing from whoever runs it, a fixture named
``store_factory`` that returns a :data:`StoreFactory`: given the test's clock,
an async context manager that yields a fresh, empty, migrated store obeying
that clock, and disposes of it afterwards. Parametrise that fixture to run the
suite against several stores.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import pytest
import pytest_asyncio

from ..queue import Queue
from ..store.base import ManualClock, Store

StoreFactory = Callable[[ManualClock], AbstractAsyncContextManager[Store]]
"""Makes the store under test for one test: fresh, empty, migrated, on this clock."""


@pytest.fixture
def clock() -> ManualClock:
    """The test's clock. Whole seconds: PostgreSQL keeps microseconds, a float epoch
    in a notice less, so every store agrees exactly on times derived from it."""
    return ManualClock(dt.datetime.now(dt.UTC).replace(microsecond=0))


@pytest_asyncio.fixture
async def store(store_factory: StoreFactory, clock: ManualClock) -> AsyncIterator[Store]:
    async with store_factory(clock) as made:
        yield made


@pytest.fixture
def queue(store: Store) -> Queue:
    return Queue(store)
