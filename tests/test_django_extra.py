"""Without Django (Python 3.11, or no ``venturi[django]``): venturi imports, and
``venturi worker --django`` says what to install in one line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("django") is not None,
                                reason="Django is installed here: tests/django cover it")


def test_venturi_imports_without_django() -> None:
    code = "import sys, venturi, venturi.cli; sys.exit('django' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_worker_django_without_django_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from venturi.cli import main; main()", "worker",
         "--django", "shop.settings", "--dsn", "postgresql://root@127.0.0.1:5432/test"],
        capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr.strip()) == (
        1, "venturi: error: --django needs Django 6 (Python 3.12 or later): pip install "
           "'venturi[django]' (No module named 'django')")
