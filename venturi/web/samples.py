"""The overview's charts: throughput and oldest lag over the last hour.

Both come from samples of ``Queue.stats()`` that the dashboard keeps in
memory, one every few seconds however many browsers watch. The lag has no
history in the database at all (it is a property of the moment), so it has
to be sampled; throughput is the growth of the finished count between two
samples. That count also shrinks when finished jobs are deleted (retention,
``venturi cleanup``) or dead ones redriven, so an interval in which it fell
is shown as a gap, not as negative work, and a deletion hides the
completions of its interval. docs/operations/dashboard.md gives the store
query that would read throughput from ``finished_at`` instead.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from venturi.store.records import Snapshot

WINDOW = 3600.0  # seconds shown
MAX_LAG_SERIES = 8  # kinds drawn on the lag chart, the ones that lagged most


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # wall-clock seconds since 1970 (the chart's x axis)
    mono: float  # monotonic seconds (the rate's denominator)
    finished: int
    lag: dict[str, float]  # kind -> seconds the oldest runnable job has waited
    runnable: int


class Samples:
    """A ring of the last hour's samples; ``series()`` is what the charts draw."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._ring: deque[Sample] = deque(maxlen=math.ceil(WINDOW / interval) + 2)

    def __len__(self) -> int:
        return len(self._ring)

    @property
    def last(self) -> Sample | None:
        return self._ring[-1] if self._ring else None

    def due(self, mono: float) -> bool:
        last = self.last
        return last is None or mono - last.mono >= self.interval * 0.95

    def add(self, snap: Snapshot, *, at: float, mono: float) -> None:
        counts = snap.counts_by_status
        self._ring.append(Sample(
            at=at, mono=mono,
            finished=counts.get("completed", 0) + counts.get("dead", 0),
            lag={k: v.total_seconds() for k, v in snap.oldest_pending_age.items()},
            runnable=sum(snap.pending_by_kind.values()),
        ))
        while self._ring and at - self._ring[0].at > WINDOW:
            self._ring.popleft()

    def series(self) -> dict[str, Any]:
        """uPlot's columns: x (seconds), finished/s, and one lag column per kind."""
        ring = list(self._ring)
        xs = [round(s.at, 3) for s in ring]
        rate: list[float | None] = [None]
        for before, after in itertools.pairwise(ring):
            span = after.mono - before.mono
            grown = after.finished - before.finished
            rate.append(round(grown / span, 3) if span > 0 and grown >= 0 else None)
        worst: dict[str, float] = {}
        for s in ring:
            for kind, seconds in s.lag.items():
                worst[kind] = max(worst.get(kind, 0.0), seconds)
        kinds = sorted(worst, key=lambda k: (-worst[k], k))[:MAX_LAG_SERIES]
        kinds.sort()
        lags = [[round(s.lag.get(kind, 0.0), 3) for s in ring] for kind in kinds]
        return {"x": xs, "throughput": rate[:len(xs)], "kinds": kinds, "lag": lags,
                "interval": self.interval}
