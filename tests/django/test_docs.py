"""Every code block of docs/integrations/django.md runs: each ``py`` block is an excerpt,
verbatim, of the example project that the other tests here run (the page's python
cannot run in the main suite's Python 3.11, where tests/test_docs_snippets.py runs
``python`` blocks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: .ci/run runs "
                    "tests/django in a 3.12 virtualenv")

from tests.django.conftest import EXAMPLE

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "django.md"
BLOCK = re.compile(r"^```py\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_every_block_is_part_of_the_tested_example() -> None:
    sources = "\n".join(p.read_text() for p in sorted(EXAMPLE.rglob("*.py")))
    blocks = BLOCK.findall(PAGE.read_text())
    assert len(blocks) >= 5
    missing = [b for b in blocks if b not in sources]
    assert missing == [], f"blocks of {PAGE.name} that examples/django does not contain"


def test_the_page_has_no_python_block_the_main_suite_would_run() -> None:
    assert "```python" not in PAGE.read_text()
