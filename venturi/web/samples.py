"""The overview's charts: throughput and oldest lag over the last hour.

Live, both come from samples of ``Queue.stats()`` that the dashboard keeps in
memory, one every few seconds however many browsers watch. Throughput is the
growth of the stats' completion and death counters (``completed_total_by_kind``,
``dead_total_by_kind``) between two samples: they count every job that finished,
deleting finished jobs does not lower them, and reading them costs a few rows
whatever the rate. The lag has no history in the database at all (it is a
property of the moment), so it is sampled only.

The hour before the dashboard started is filled once from the jobs' own
``finished_at`` (``Queue.finished_per_minute``, per minute, reading at most
:data:`BACKFILL_ROWS` jobs): exact where it reached, for the jobs still in the
table. It is not used live because its cost grows with the jobs finished in the
window (docs/operations/dashboard.md).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from venturi.store.records import FinishedMinute, Snapshot

WINDOW = 3600.0  # seconds shown
MAX_LAG_SERIES = 8  # kinds drawn on the lag chart, the ones that lagged most
BACKFILL_ROWS = 200_000  # finished jobs read, at most, to draw the hour before the start


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # wall-clock seconds since 1970 (the chart's x axis)
    mono: float  # monotonic seconds (the rate's denominator)
    completed: int  # completions ever (the stats' counter)
    dead: int  # deaths ever
    lag: dict[str, float]  # kind -> seconds the oldest runnable job has waited
    runnable: int


@dataclass(frozen=True, slots=True)
class Minute:
    """A minute before the dashboard started: its end and its rates per second."""

    at: float
    completed: float
    dead: float


class Samples:
    """A ring of the last hour's samples; ``series()`` is what the charts draw."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._ring: deque[Sample] = deque(maxlen=math.ceil(WINDOW / interval) + 2)
        self._history: list[Minute] = []
        self.backfilled = False

    def __len__(self) -> int:
        return len(self._ring)

    @property
    def last(self) -> Sample | None:
        return self._ring[-1] if self._ring else None

    def due(self, mono: float) -> bool:
        last = self.last
        return last is None or mono - last.mono >= self.interval * 0.95

    def add(self, snap: Snapshot, *, at: float, mono: float) -> None:
        self._ring.append(Sample(
            at=at, mono=mono,
            completed=sum(snap.completed_total_by_kind.values()),
            dead=sum(snap.dead_total_by_kind.values()),
            lag={k: v.total_seconds() for k, v in snap.oldest_pending_age.items()},
            runnable=sum(snap.pending_by_kind.values()),
        ))
        while self._ring and at - self._ring[0].at > WINDOW:
            self._ring.popleft()
        while self._history and at - self._history[0].at > WINDOW:
            self._history.pop(0)

    def backfill(self, minutes: Sequence[FinishedMinute], *, limit: int, start: float) -> None:
        """The minutes before ``start`` (wall-clock seconds), from
        ``finished_per_minute(..., limit=limit)``. When the read stopped at ``limit``
        its oldest minute is partial, and left out."""
        totals: dict[float, list[int]] = {}
        for m in minutes:
            end = m.minute.timestamp() + 60
            if end <= start:
                counts = totals.setdefault(end, [0, 0])
                counts[0] += m.completed
                counts[1] += m.dead
        ends = sorted(totals)
        if ends and sum(m.completed + m.dead for m in minutes) >= limit:
            ends = ends[1:]
        self._history = [Minute(end, totals[end][0] / 60, totals[end][1] / 60) for end in ends
                         if start - end < WINDOW]
        self.backfilled = True

    def series(self) -> dict[str, Any]:
        """uPlot's columns: x (seconds), completed/s, dead/s, one lag column per kind.
        Minutes before the dashboard started come first (no lag: it was not sampled)."""
        ring = list(self._ring)
        history = [m for m in self._history if not ring or m.at <= ring[0].at]
        completed: list[float | None] = [round(m.completed, 3) for m in history]
        dead: list[float | None] = [round(m.dead, 3) for m in history]
        completed.append(None)
        dead.append(None)
        for before, after in itertools.pairwise(ring):
            span = after.mono - before.mono
            grown = (after.completed - before.completed, after.dead - before.dead)
            # A counter that went back (the jobs table was truncated) is a gap.
            ok = span > 0 and min(grown) >= 0
            completed.append(round(grown[0] / span, 3) if ok else None)
            dead.append(round(grown[1] / span, 3) if ok else None)
        xs = [round(m.at, 3) for m in history] + [round(s.at, 3) for s in ring]
        worst: dict[str, float] = {}
        for s in ring:
            for kind, seconds in s.lag.items():
                worst[kind] = max(worst.get(kind, 0.0), seconds)
        kinds = sorted(worst, key=lambda k: (-worst[k], k))[:MAX_LAG_SERIES]
        kinds.sort()
        lags = [[None] * len(history) + [round(s.lag.get(kind, 0.0), 3) for s in ring]
                for kind in kinds]
        n = len(xs)
        return {"x": xs, "completed": completed[:n], "dead": dead[:n], "kinds": kinds,
                "lag": lags, "interval": self.interval, "history": len(history)}
