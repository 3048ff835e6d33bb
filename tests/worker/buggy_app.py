"""An ``--app`` for ``venturi worker`` whose store has a bug: the store method named by
``VENTURI_TEST_BUG`` raises ``RuntimeError`` from its second call on (so the worker has
booted and its services run). Only ever imported by the worker process a test starts."""

from __future__ import annotations

import os
from typing import Any

import venturi
from venturi.store.postgres import PostgresStore

BUG = os.environ.get("VENTURI_TEST_BUG")


class Ping(venturi.Task, kind="buggy.ping"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


def _install(method: str) -> None:
    real = getattr(PostgresStore, method)
    calls = 0

    async def buggy(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError(f"injected bug in {method}")
        return await real(self, *args, **kwargs)

    setattr(PostgresStore, method, buggy)


if BUG:
    _install(BUG)
