"""The conformance suite's tests, for ``from venturi.testing.suite import *``."""

from __future__ import annotations

from types import ModuleType

import pytest

from ..fixtures import clock, queue, store
from . import (
    claim,
    counting,
    dependencies,
    enqueue,
    flow,
    inspection,
    journal,
    plain,
    recovery,
    regressions,
    results,
    settle,
    trace_context,
    transitions,
    views,
    workflows,
)

MODULES: tuple[ModuleType, ...] = (
    claim, counting, dependencies, enqueue, flow, inspection, journal, plain, recovery,
    regressions, results, settle, trace_context, transitions, views, workflows)

# Async tests run under pytest-asyncio, in its strict mode too.
pytestmark = pytest.mark.asyncio

__all__ = ["clock", "pytestmark", "queue", "store"]
for _module in MODULES:
    for _name, _test in vars(_module).items():
        if _name.startswith("test_") and callable(_test):
            if _name in globals():
                raise RuntimeError(f"two conformance tests are named {_name}")
            globals()[_name] = _test
            __all__.append(_name)
