"""What a missing capability means: a skip on a developer's machine, a failure in CI.

Under ``CI=true`` PostgreSQL, the pooler and the private clusters of the fault tests
must be there (``.ci/run`` installs them): a test that skips for want of one has not
passed, so the fixtures that provide them fail instead, and so does any other skip of a
test that uses them (the report hook in ``tests/conftest.py``).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip for want of PostgreSQL, the pooler or a private cluster; under CI, fail."""
    if in_ci():
        pytest.fail(f"under CI=true: {reason} (.ci/run must provide it)", pytrace=False)
    pytest.skip(reason)
