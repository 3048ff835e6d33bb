"""Flow control's records: limits, a kind's controls and state, a limited claim's answer.

A kind's limits come from two places (docs/concepts/flow-control.md): its task class
(``concurrency=``, ``rate=``, declared by every worker as it starts) and an operator
(``Queue.set_limits``), whose value overrides the code's until cleared. Both are rows
of ``{prefix}kinds``; every claim reads them, so they are global.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from ..errors import ConfigError
from .records import JobRecord

_PERIODS = {"s": dt.timedelta(seconds=1), "m": dt.timedelta(minutes=1),
            "h": dt.timedelta(hours=1)}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([smh])\s*$")
MAX_CONCURRENCY = 1_000_000
MAX_RATE = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` claims in any window of ``period``."""

    count: int
    period: dt.timedelta

    @classmethod
    def parse(cls, value: Rate | str) -> Rate:
        """``"50/s"``, ``"600/m"``, ``"1000/h"`` (or a Rate)."""
        if isinstance(value, Rate):
            return value
        match = _RATE.match(value) if isinstance(value, str) else None
        if match is None:
            raise ConfigError(f"rate {value!r} is not N/s, N/m or N/h (e.g. 50/s)")
        count = int(match.group(1))
        if not 1 <= count <= MAX_RATE:
            raise ConfigError(f"rate {value!r}: N must be 1..{MAX_RATE}")
        return cls(count, _PERIODS[match.group(2)])

    def __str__(self) -> str:
        for unit, length in _PERIODS.items():
            if self.period == length:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.period.total_seconds():g}s"


def check_concurrency(value: object, what: str = "concurrency") -> int:
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 1 <= value <= MAX_CONCURRENCY:
        raise ConfigError(f"{what} must be an int 1..{MAX_CONCURRENCY}, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Limits:
    """A concurrency and a rate; None is no limit of that sort."""

    concurrency: int | None = None
    rate: Rate | None = None

    @property
    def any(self) -> bool:
        return self.concurrency is not None or self.rate is not None


NO_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class KindChange:
    """An operator's change to a kind: pause or resume (``paused``), and a limit set or
    cleared (``set_concurrency`` / ``set_rate`` with the new value, None clearing it)."""

    kind: str
    paused: bool | None = None
    set_concurrency: bool = False
    concurrency: int | None = None
    set_rate: bool = False
    rate: Rate | None = None


@dataclass(frozen=True, slots=True)
class KindState:
    """A kind as ``Queue.kinds()`` reports it: its controls, the limits in force and
    where each comes from, and what holds it back now (``held``: ``"paused"``,
    ``"concurrency"``, ``"rate"``, or None)."""

    kind: str
    paused: bool = False
    operator: Limits = NO_LIMITS
    code: Limits = NO_LIMITS
    pending: int = 0
    claimed: int = 0
    started_in_window: int = 0  # claims inside the current rate window
    held: str | None = None

    @property
    def limits(self) -> Limits:
        """The limits in force: the operator's where set, else the code's."""
        return Limits(
            self.operator.concurrency if self.operator.concurrency is not None
            else self.code.concurrency,
            self.operator.rate if self.operator.rate is not None else self.code.rate)

    @property
    def sources(self) -> dict[str, str | None]:
        """Where each limit in force comes from: ``"operator"``, ``"code"`` or None."""
        def source(op: object, code: object) -> str | None:
            return "operator" if op is not None else "code" if code is not None else None
        return {"concurrency": source(self.operator.concurrency, self.code.concurrency),
                "rate": source(self.operator.rate, self.code.rate)}


def held_by(paused: bool, limits: Limits, claimed: int, started: int) -> str | None:
    """What holds a kind back, judged on its whole-kind counts (a limit per key can
    hold some keys back while the kind as a whole is not)."""
    if paused:
        return "paused"
    if limits.concurrency is not None and claimed >= limits.concurrency:
        return "concurrency"
    if limits.rate is not None and started >= limits.rate.count:
        return "rate"
    return None


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    """What a claim of limited kinds took, and what held the rest back: ``more`` when it
    stopped short for a reason that the next claim does not have (claim again at once);
    ``held``, after a short claim, the kinds with a partition out of room and why
    (``"concurrency"`` or ``"rate"``); ``retry_at`` the earliest time a full rate window
    frees budget (a timer, not a poll); ``near``, the kinds it left with a partition
    more than half used or full (whose settlements other workers may wait for)."""

    jobs: list[JobRecord] = field(default_factory=list)
    more: bool = False
    retry_at: dt.datetime | None = None
    held: tuple[tuple[str, str], ...] = ()
    near: frozenset[str] = frozenset()
