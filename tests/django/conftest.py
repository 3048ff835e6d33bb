"""Django's own test tooling, against real PostgreSQL, on the example shop
(examples/django).

Django 6 needs Python 3.12 or later: in the main run (Python 3.11) every module here
skips for that reason, and .ci/run runs this directory again in a 3.12 virtualenv,
where a Django that does not import fails the run under CI=true instead.

Django's test runner machinery makes the test database (``test_shop_<random>``, so
runs do not collide) and runs ``migrate`` on it, whose ``post_migrate`` creates
venturi's tables there, as it does for a user's tests (venturi/contrib/django/apps.py).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ci import in_ci

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django"
NEEDS = "Django 6 needs Python >= 3.12: .ci/run runs tests/django in a 3.12 virtualenv"

try:
    import django
except ImportError:
    django = None

if django is None and sys.version_info >= (3, 12) and in_ci():
    raise RuntimeError("under CI=true on Python >= 3.12, Django must be installed: "
                       "pip install -e '.[dev]' (the django extra)")

if django is not None:
    sys.path.insert(0, str(EXAMPLE))
    os.environ["DJANGO_SETTINGS_MODULE"] = "shop.settings"
    os.environ.setdefault("SHOP_TEST_DB_NAME", f"test_shop_{secrets.token_hex(4)}")
    django.setup()


@pytest.fixture(scope="session", autouse=True)
def django_test_database(pg_dsn: str) -> Iterator[None]:
    """What Django's DiscoverRunner does around a run: the test environment and the
    test database (created, migrated, dropped)."""
    from django.test.utils import (
        setup_databases,
        setup_test_environment,
        teardown_databases,
        teardown_test_environment,
    )

    setup_test_environment()
    old = setup_databases(verbosity=0, interactive=False)
    try:
        yield
    finally:
        teardown_databases(old, verbosity=0)
        teardown_test_environment()
