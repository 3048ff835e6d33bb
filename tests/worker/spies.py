"""Spies on a real store's contract methods (``venturi/store/base.py``).

Every call still runs on the real store: a spy only records when it began and
what it returned, or raises instead of calling the store while a test's
condition holds (an injected outage, an injected bug). Nothing of PostgreSQL is
mocked. Installed with ``monkeypatch``, so the store is itself again after the
test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class Call:
    began: float  # event-loop time
    args: tuple[Any, ...]
    result: Any = None
    error: BaseException | None = None
    ended: float | None = None
    seq: int = field(default=0)
    seen: Any = None  # what ``observe`` returned as the call began


def record(monkeypatch: pytest.MonkeyPatch, store: Any, method: str,
           *, fail: Callable[[], BaseException | None] | None = None,
           observe: Callable[[], Any] | None = None) -> list[Call]:
    """Record every call of ``store.method``. When ``fail`` returns an exception, as the call
    begins or again as the store's answer comes back (a reply lost to an outage), the call
    raises it instead (and is recorded with it). ``observe`` is called as each call
    begins; its result is kept as ``Call.seen``."""
    real = getattr(store, method)
    calls: list[Call] = []

    async def spy(*args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        call = Call(loop.time(), args, seq=len(calls),
                    seen=observe() if observe is not None else None)
        calls.append(call)
        try:
            error = fail() if fail is not None else None
            if error is not None:
                raise error
            result = await real(*args, **kwargs)
            # A call in flight when the failure began fails too: its reply never came.
            error = fail() if fail is not None else None
            if error is not None:
                raise error
            call.result = result
            return result
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            call.ended = loop.time()

    monkeypatch.setattr(store, method, spy)
    return calls


def gaps(calls: list[Call]) -> list[float]:
    """Seconds between the starts of consecutive calls."""
    return [b.began - a.began for a, b in itertools.pairwise(calls)]


class Stalls:
    """A reference on the test's event loop: a short sleep in a loop, recording when
    each woke and how late. A stall of the loop (or of the whole process, descheduled
    on a loaded machine) delays the tick that spans it, so the lateness of the ticks
    that woke within a window is how long the loop stood still in it. Timing checks
    bound a gap by its expected length plus that, not by a wall-clock margin."""

    def __init__(self, period: float = 0.01) -> None:
        self.period = period
        self.ticks: list[tuple[float, float]] = []  # (woke, late)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Stalls:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await asyncio.sleep(self.period)
            woke = loop.time()
            self.ticks.append((woke, woke - began - self.period))

    def within(self, start: float, end: float) -> float:
        """Seconds the loop stood still between ``start`` and ``end`` (loop time)."""
        return sum(late for woke, late in self.ticks if start < woke <= end + self.period)
