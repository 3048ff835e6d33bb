"""The ``spans`` fixture: a tracer provider recording into memory, for any test that asks
for it (a plugin of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .spans import as_data, install, recording


class Recorded:
    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter

    def spans(self) -> list[dict[str, Any]]:
        return [as_data(s) for s in self.exporter.get_finished_spans()]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans() if s["name"] == name]


@pytest.fixture
def spans() -> Iterator[Recorded]:
    """The global tracer provider while the test runs: the SDK's, exporting into memory."""
    provider, exporter = recording()
    install(provider)
    try:
        yield Recorded(exporter)
    finally:
        install(None)
        provider.shutdown()
