"""How far ahead of its slots a worker claims: the prefetch window.

A worker that claims only for free slots alternates, with short jobs, a claim's round
trip (the slots idle) with running the batch (the claim connection idle). Claiming
ahead overlaps the two, at a price: a buffered job waits behind running ones, and
another worker may be idle meanwhile. The window is therefore what the round trip
justifies, bounded by how long a buffered job may wait (docs/concepts/leases.md,
"Prefetch"; docs/operations/sizing.md):

- ``WAIT_BOUND``: the buffer holds at most as many jobs as the slots get through in
  that time, at the rate observed and as if every job took as long as the slowest
  kind's runs so far (or the oldest run still going). A kind whose runs take longer
  than the bound times the concurrency is not prefetched at all. Where a claim's round
  trip is longer than that (a database far away, or busy), the window may hold one
  round trip's work instead, up to ``SLOW_TRIP_BOUND``: another worker could not claim
  a buffered job sooner than its own round trip, and a window shorter than the round
  trip leaves the slots idle for the rest of every claim. The slow kinds' limit stays
  at ``WAIT_BOUND``.
- within it, three times the jobs the slots run during one claim's round trip: the
  next claim goes out while a round trip's worth is still buffered, and returns before
  they run out, with about two round trips' worth.
- while the table has a backlog (the last claim came back with all it asked for, and
  none of the worker's kinds is limited), at least ``BACKLOG_AHEAD`` jobs, up to
  ``BACKLOG_BOUND`` of the slots' work: a worker that shares the kinds finds the same
  backlog, so it is not idle for want of the buffered jobs, and claims of a few hundred
  rows are what lets several processes on one table keep up with one (each claim and
  settle is a statement and a commit; docs/operations/sizing.md, "Many processes on one
  table"). A window already that large is left as it is: a larger one only costs one
  process memory and collector time. The first claim that comes back short ends it; slow
  kinds keep their ``WAIT_BOUND`` limit.

The rate that sizes the window is the slots' pace while they have work: time the
worker sat with nothing to run, waiting for a claim's rows, is not counted. Counted, a
worker that shares the table with others (its claims slower, its slots idle meanwhile)
would see a lower rate, claim fewer, wait on more round trips and see a lower rate
still: many small claims, each a commit (docs/operations/sizing.md, "Many processes on
one table").

``prefetch=N`` fixes the window at ``N`` (0: claim only for free slots).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

WAIT_BOUND = 0.040  # seconds of the slots' work a buffered job may wait behind
SLOW_TRIP_BOUND = 0.100  # ... or as long as a claim's round trip, up to this
RATE_HORIZON = 0.050  # seconds: the time constant of the observed job rate's average
RTT_WEIGHT = 0.25  # weight of the latest claim in the round trip's moving average
MAX_AHEAD = 10_000  # the largest window, fixed or adaptive (as WorkerConfig allows)
BACKLOG_AHEAD = 250  # with a backlog: the window may hold this many jobs ...
BACKLOG_BOUND = 0.080  # ... up to this many seconds of the slots' work


@dataclass(frozen=True, slots=True)
class ClaimWindow:
    """How many claims a worker may hold, and when the next claim may go out early.

    The claimer claims ``capacity`` minus what it holds, once at least ``floor`` are
    free or no more than ``low`` jobs are left waiting for a slot. With ``overlap``, a
    slot about to start a job yields to the claimer first when that holds, so the
    claim's round trip overlaps runs instead of alternating with them.

    A fixed window (``prefetch=N``) sends the claim once the window is free: it leaves
    about ``concurrency`` jobs buffered, which hides a round trip only when the slots
    are at least as many as the window (docs/benchmarks.md, "The next claim overlaps the
    buffered jobs"), so overlap is off for wider fixed windows. The adaptive window
    sends it while ``low`` jobs are left: those the slots run during one round trip.
    """

    capacity: int  # slots plus the prefetch window
    floor: int  # with more than ``low`` jobs buffered, claim no fewer than this
    low: int  # ... or claim as soon as no more than this many are buffered
    overlap: bool

    @classmethod
    def of(cls, concurrency: int, prefetch: int) -> ClaimWindow:
        """A fixed window of ``prefetch`` jobs."""
        return cls(concurrency + prefetch, max(1, prefetch), 0, 0 < prefetch <= concurrency)

    @classmethod
    def ahead(cls, concurrency: int, ahead: int, low: int) -> ClaimWindow:
        """An adaptive window of ``ahead`` jobs, the next claim sent at ``low`` left."""
        if ahead <= 0:
            return cls(concurrency, 1, 0, False)
        return cls(concurrency + ahead, concurrency + ahead, min(low, ahead), True)

    def claim_now(self, active: int, buffered: int) -> int:
        """How many to claim now, holding ``active`` claims of which ``buffered`` wait
        for a slot: 0 when the next claim should wait."""
        free = self.capacity - active
        return free if free > 0 and (free >= self.floor or buffered <= self.low) else 0


class Prefetch:
    """The window of one worker: fixed, or adapted before every claim.

    The slots report each finished run (:meth:`ran`), the claimer each claim's round
    trip (:meth:`claimed`) and asks for the window before each claim (:meth:`window`).
    Times are the event loop's clock, in seconds; ``clock`` is injected in tests.
    """

    def __init__(self, concurrency: int, fixed: int | None, clock: Callable[[], float]) -> None:
        self._concurrency = concurrency
        self._fixed = fixed
        self._clock = clock
        self.current = ClaimWindow.of(concurrency, fixed) if fixed is not None \
            else ClaimWindow.ahead(concurrency, 0, 0)
        self.rate = 0.0  # runs ended per second, averaged over about RATE_HORIZON
        self.pace = 0.0  # ... per second the slots had work: what sizes the window
        self.rtt = 0.0  # a claim's round trip, seconds (moving average)
        self._ended = 0  # runs ended, all told
        self._seen = 0  # ... when the rate was last updated
        self._at = clock()  # when the rate was last updated
        self._paced = 0  # runs ended when the pace was last updated
        self._paced_at = self._at  # ... and when
        self._waited = 0.0  # seconds the slots sat idle for a claim since then
        self._slowest: dict[str, float] = {}  # per kind: the moving average of its runs
        self.backlog = False  # the last claim came back full, and no kind is limited

    @property
    def adaptive(self) -> bool:
        return self._fixed is None

    def ran(self, kind: str, seconds: float) -> None:
        """A run of ``kind`` ended after ``seconds``."""
        self._ended += 1
        if self._fixed is None:
            before = self._slowest.get(kind)
            # Halfway to the latest: a kind that turns slow is known at its next run.
            self._slowest[kind] = seconds if before is None else (before + seconds) / 2

    def claimed(self, seconds: float, waited: float = 0.0, *, backlog: bool = False) -> None:
        """A claim took ``seconds`` from send to rows; for ``waited`` of them the worker
        had nothing to run (``HeldJobs.idle_for``). ``backlog``: it came back with all it
        asked for, and none of the worker's kinds is limited (module doc)."""
        self.backlog = backlog
        self.rtt = seconds if self.rtt == 0.0 else self.rtt + (seconds - self.rtt) * RTT_WEIGHT
        self._waited += min(max(waited, 0.0), seconds)

    def _observe(self, now: float) -> float:
        """The job rate, brought up to ``now``."""
        elapsed = now - self._at
        if elapsed > 0:
            observed = (self._ended - self._seen) / elapsed
            self.rate += (observed - self.rate) * (1 - math.exp(-elapsed / RATE_HORIZON))
            self._at, self._seen = now, self._ended
        return self.rate

    def _observe_pace(self, now: float) -> float:
        """The slots' pace, brought up to ``now``: runs ended per second of the time
        since the last update less the time spent waiting for claims. Only the window
        asks, once before each claim, so a claim's wait falls in the span it is taken
        from."""
        busy = now - self._paced_at - self._waited
        if busy > 0:
            observed = (self._ended - self._paced) / busy
            self.pace += (observed - self.pace) * (1 - math.exp(-busy / RATE_HORIZON))
            self._paced_at, self._paced, self._waited = now, self._ended, 0.0
        return self.pace

    def current_rate(self) -> float:
        """Runs ending per second now (averaged over about ``RATE_HORIZON``), whatever
        the window: what the settler expects to collect if it waits (settler.py)."""
        return self._observe(self._clock())

    @property
    def wait_bound(self) -> float:
        """How long a buffered job may wait behind the running ones (module doc)."""
        return min(max(WAIT_BOUND, self.rtt), SLOW_TRIP_BOUND)

    def window(self, running_since: Callable[[], Iterable[float]]) -> ClaimWindow:
        """The window for the claim about to go out. ``running_since`` gives the start
        times of the runs going on now, or just the oldest's (asked only when the window
        would be open)."""
        if self._fixed is not None:
            return self.current
        now = self._clock()
        pace = self._observe_pace(now)
        low = math.ceil(pace * self.rtt)
        bound = self.wait_bound
        ahead = min(3 * low, int(pace * bound), MAX_AHEAD)
        if self.backlog:
            ahead = max(ahead, min(BACKLOG_AHEAD, int(pace * BACKLOG_BOUND)))
        if ahead > 0:
            slowest = max(self._slowest.values(), default=0.0)
            oldest = min(running_since(), default=now)
            slowest = max(slowest, now - oldest)
            if slowest > 0:
                # Slow kinds keep WAIT_BOUND whatever the round trip: one slow claim
                # lifts its average, and a slow job buffered here is one another worker
                # could be running.
                ahead = min(ahead, int(self._concurrency * WAIT_BOUND / slowest))
        self.current = ClaimWindow.ahead(self._concurrency, ahead, low)
        return self.current
