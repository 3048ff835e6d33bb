"""venturi.testing is an extra: the library never imports it, and without pytest it says
which extra to install."""

from __future__ import annotations

import subprocess
import sys


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_library_does_not_import_the_suite_or_pytest() -> None:
    result = _python("import venturi, venturi.store.postgres, sys; "
                     "assert 'venturi.testing' not in sys.modules and 'pytest' not in sys.modules")
    assert result.returncode == 0, result.stderr


def test_without_pytest_the_suite_names_its_extra() -> None:
    result = _python("import sys; sys.modules['pytest_asyncio'] = None; import venturi.testing")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "pytest_asyncio is missing" in last and "venturi[testing]" in last, last
