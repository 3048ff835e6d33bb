"""venturi's store conformance suite, shipped for any store to run (docs/testing.md).

``venturi.testing.suite`` holds the tests every :class:`~venturi.store.base.Store`
must pass: the PostgreSQL store and the in-memory one run it in venturi's own
tests, and another adapter, or a fake of a user's own, runs it the same way, by
importing the suite into a test module and giving it a ``store_factory``
fixture (``venturi.testing.fixtures``). It needs pytest and pytest-asyncio
(``pip install 'venturi[testing]'``).
"""

try:
    import pytest
    import pytest_asyncio  # noqa: F401 - the suite's async fixtures and tests need it
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        f"venturi.testing needs pytest and pytest-asyncio ({exc.name} is missing): "
        "pip install 'venturi[testing]'") from None

# Before the suite is imported: its assertions then explain themselves as a test
# module's would.
pytest.register_assert_rewrite("venturi.testing.builders", "venturi.testing.suite")

from .fixtures import StoreFactory  # noqa: E402

__all__ = ["StoreFactory"]
