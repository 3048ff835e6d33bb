"""venturi's store conformance suite, shipped for any store to run (docs/testing.md).

``venturi.testing.suite`` holds the tests every :class:`~venturi.store.base.Store`
must pass: the PostgreSQL store and the in-memory one run it in venturi's own
tests, and another adapter, or a fake of a user's own, runs it the same way, by
importing the suite into a test module and giving it a ``store_factory``
fixture (``venturi.testing.fixtures``). It needs pytest and pytest-asyncio.
"""

import pytest

# Before the suite is imported: its assertions then explain themselves as a test
# module's would.
pytest.register_assert_rewrite("venturi.testing.builders", "venturi.testing.suite")

from .fixtures import StoreFactory  # noqa: E402

__all__ = ["StoreFactory"]
