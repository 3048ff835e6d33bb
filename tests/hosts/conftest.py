"""The host tests need root, iproute2 (network namespaces, veth pairs, a bridge) and the
PostgreSQL server binaries; each test skips naming what is missing (under ``CI=true`` it
fails instead: tests/ci.py, since .ci/run installs them)."""

from __future__ import annotations

import pytest

from ..ci import unavailable
from .testbed import unavailable_reason


@pytest.fixture
def hosts_available() -> None:
    reason = unavailable_reason()
    if reason:
        unavailable(f"test hosts unavailable: {reason}")
