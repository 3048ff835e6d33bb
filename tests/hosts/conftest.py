"""The host tests need root, iproute2 (network namespaces, veth pairs, a bridge) and the
PostgreSQL server binaries; each test skips naming what is missing."""

from __future__ import annotations

import pytest

from .testbed import unavailable_reason


@pytest.fixture
def hosts_available() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"test hosts unavailable: {reason}")
