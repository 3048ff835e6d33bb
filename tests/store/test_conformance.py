"""The shipped conformance suite (venturi.testing), against both stores (tests/conftest.py's
``store_factory``)."""

from venturi.testing.suite import *  # noqa: F403
