"""Clocks: every store operation reads "now" from one.

The default clock returns ``None``, which means "ask the database" (``now()``):
time is the database's, never a worker's wall clock (docs/concepts/lifecycle.md).
Tests inject a :class:`ManualClock`, which both stores obey.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol

UTC = dt.UTC


class Clock(Protocol):
    def now(self) -> dt.datetime | None:
        """The current time, or None to let the database decide (``now()``)."""


class DatabaseClock:
    """Production clock: the database's ``now()`` is the only time."""

    def now(self) -> None:
        return None


class ManualClock:
    """A clock under a test's control; PostgreSQL and memory stores both obey it."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = (start or dt.datetime.now(UTC)).astimezone(UTC)

    def now(self) -> dt.datetime:
        return self._now

    def advance(self, delta: dt.timedelta | float) -> dt.datetime:
        if not isinstance(delta, dt.timedelta):
            delta = dt.timedelta(seconds=delta)
        self._now += delta
        return self._now

    def set(self, when: dt.datetime) -> None:
        self._now = when.astimezone(UTC)
