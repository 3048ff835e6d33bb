"""Where a job is claimed: the claim loop, and the hand-off of claimed jobs to the slots.

One claim at a time, for as many jobs as there are free slots plus the prefetch window
(``prefetch.py``, worked out again before each claim): ``claim_wanted`` says when to
look, the claim statement decides what runs (docs/concepts/lifecycle.md), and the
priority floor splits each batch between the tiers (docs/concepts/priorities.md,
``fairness.py``). Nothing is claimed before the buffered settlements of an outage are
written (docs/concepts/failures.md).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable

import anyio

from ..errors import CONFLICT_PAUSE, DatabaseConflict, DatabaseUnavailable, classify
from ..logs import get_logger
from ..store.base import ClaimRequest, JobRecord, LimitedClaim, Store
from .clock import DbClock
from .fairness import Fairness
from .flow import Flow
from .health import DatabaseHealth
from .held import Held, HeldJobs
from .identity import Identity
from .metrics import KindMetrics
from .prefetch import Prefetch
from .settler import Settler
from .waker import VisibilityTimer

log = get_logger("venturi.worker")


class Claimer:
    """Claims while ``claim_wanted`` is set, until ``stop`` is."""

    def __init__(self, store: Store, identity: Identity, leases: dict[str, dt.timedelta],
                 prefetch: Prefetch, held: HeldJobs, settler: Settler, timer: VisibilityTimer,
                 db: DatabaseHealth, clock: DbClock, kinds: dict[str, KindMetrics],
                 flow: Flow, claim_wanted: asyncio.Event, stop: asyncio.Event) -> None:
        self._store = store
        self._identity = identity
        self._leases = leases
        self._deadlines = {k: (v, v.total_seconds() * 2 / 3) for k, v in leases.items()}
        self._prefetch = prefetch
        self._held = held
        self._settler = settler
        self._timer = timer
        self._db = db
        self._clock = clock
        self._kinds = kinds
        self._flow = flow
        self._claim_wanted = claim_wanted
        self._stop = stop
        self._fairness = Fairness()
        self.claiming = False  # a claim is in flight
        self._backlog = True  # work may be waiting for room (room_freed)
        self._every_room = False  # a drain to empty: every freed slot looks again
        self.trace = False  # log every claimed job (DEBUG): decided once per run

    def room_freed(self) -> None:
        """A held job stopped taking a slot, or the settler's buffer emptied. That is
        worth a claim only when work was left waiting for room: the last claim took all
        it asked for (or a limited kind's claim came back short: a settle may free its
        budget), or a wake-up found no room. After a claim that came back short, new work
        comes with a wake-up of its own (a notification, the timer, the reaper, the
        poller), and a claim on every freed slot finds nothing: at a trickle, two empty
        claims per job (docs/concepts/leases.md, "When a worker claims"). A drain to empty
        (``run(until_empty=True)``) looks again on every one: it ends on an empty claim
        made once nothing is held or left to settle."""
        if self._backlog or self._every_room:
            self._claim_wanted.set()

    def wants_turn(self) -> bool:
        """Whether a slot about to start a job should let the next claim go out first
        (``ClaimWindow.overlap``)."""
        window, held = self._prefetch.current, self._held
        return (window.overlap and not self.claiming and self._claim_wanted.is_set()
                and window.claim_now(held.active, held.inbox.qsize()) > 0)

    async def run(self, *, until_empty: bool = False) -> bool:
        """Claim until a stop is requested; with ``until_empty``, also until no runnable
        work is left (then True: the caller drains the worker)."""
        held_jobs, settler, prefetch = self._held, self._settler, self._prefetch
        loop_time = asyncio.get_running_loop().time
        self._every_room = until_empty
        while not self._stop.is_set():
            await self._claim_wanted.wait()
            self._claim_wanted.clear()
            if self._stop.is_set():
                return False
            window = prefetch.window(held_jobs.oldest_start)
            free = window.claim_now(held_jobs.active, held_jobs.inbox.qsize())
            if not free:
                # No room, or the slots have buffered work: wait for a worthwhile batch,
                # claimed when room frees.
                self._backlog = True
                continue
            settled_before = settler.written
            try:
                # The flush-first wait only exists after an outage; its stop guard costs a
                # task group per claim, so it is only set up then.
                if self._db.flush_pending and not await self._unless_stopped(
                        settler.flushed_after_outage):
                    return False
                self.claiming = True
                sent = loop_time()
                try:
                    jobs, more = await self._claim(free)
                finally:
                    self.claiming = False
                # Idle slots waiting for these rows are not job time; a full claim of
                # unlimited kinds leaves a backlog every worker finds (prefetch.py).
                prefetch.claimed(loop_time() - sent, held_jobs.idle_for(),
                                 backlog=len(jobs) == free and not self._flow.limited)
            except DatabaseUnavailable:
                if not await self._db.back_off("claimer", until=self._stop):
                    return False
                self._claim_wanted.set()
                continue
            except DatabaseConflict as exc:
                # Rolled back whole (a limited claim's counters, say, in a deadlock):
                # nothing was claimed; the claim goes out again shortly.
                log.info("claim_conflict_retried", error=classify(exc))
                await anyio.sleep(CONFLICT_PAUSE)
                self._claim_wanted.set()
                continue
            self._db.recovered("claimer")
            if jobs:
                self._dispatch(jobs, sent)
            full = len(jobs) == free or more
            self._backlog = full or self._flow.blocked
            if full:
                self._claim_wanted.set()  # there is probably more: claim again as slots free up
            else:
                quiet = settled_before == settler.written  # nothing committed mid-claim
                if (until_empty and quiet and not jobs and not len(held_jobs)
                        and not len(settler) and not self._flow.waiting):
                    try:
                        left = await self._runnable_left()
                    except DatabaseUnavailable:
                        if not await self._db.back_off("claimer", until=self._stop):
                            return False
                        left = True
                    if not left:
                        log.info("queue_empty", worker=self._identity.name)
                        return True  # the drain follows
                    # The claim skipped a runnable job another transaction held (a
                    # result() caller's flag, say), or the database went away before
                    # that was known: claim again shortly, limited kinds included.
                    await anyio.sleep(CONFLICT_PAUSE)
                    if self._flow.blocked:
                        self._flow.unblock()
                    self._claim_wanted.set()
                    continue
                # No re-read of the next delayed job here: every statement that makes
                # work due later announces its time, and the timer asks again each time
                # it fires (docs/concepts/leases.md, "When a worker claims").
                if until_empty and not quiet:
                    self._claim_wanted.set()
        return False

    async def _runnable_left(self) -> bool:
        """After an empty claim in a drain to empty: whether a runnable job is left that
        the claim skipped because another transaction held it locked
        (``Store.runnable_left``), of a kind not paused and, if limited, not near its
        limit (a kind its limit holds back ends the drain, as before)."""
        return await self._store.runnable_left(self._flow.with_room(self._leases))

    async def _claim(self, free: int) -> tuple[list[JobRecord], bool]:
        """Up to ``free`` jobs: the limited kinds' first, within their budget
        (docs/concepts/flow-control.md), then the other kinds' in the rest. The floor's
        reserved slots are split over both, as one batch. ``more``: a limited claim
        stopped short for a reason the next one will not have."""
        flow = self._flow  # its view of the kinds' rows, re-read in the background
        plain, limited = flow.split(self._leases)
        jobs: list[JobRecord] = []
        more = False
        got: LimitedClaim | None = None
        if limited:
            low, normal = self._fairness.split(free)
            sent_at = flow.wakeups
            got = await self._store.claim_limited(ClaimRequest(
                self._identity.claimed_by, limited, free, reserve_normal=normal,
                reserve_low=low))
            jobs, more = got.jobs, got.more
            self._fairness.advance(len(jobs))
            if len(jobs) < free and not more:
                retry_at = None if got.retry_at is None else self._clock.to_local(got.retry_at)
                flow.claimed_short(retry_at, sent_at)
                if retry_at is not None:
                    self._timer.wake_at(retry_at)
        rest = free - len(jobs)
        found: list[JobRecord] = []
        if plain and rest > 0:
            low, normal = self._fairness.split(rest)
            found = await self._store.claim(ClaimRequest(
                self._identity.claimed_by, plain, rest, reserve_normal=normal,
                reserve_low=low))
            self._fairness.advance(len(found))
            jobs = jobs + found if jobs else found
        if got is not None or flow.paused:
            flow.observe(got or LimitedClaim(), found)
        return jobs, more

    def _dispatch(self, jobs: list[JobRecord], sent: float) -> None:
        """Hold the claimed jobs and hand them to the slots (per-batch bookkeeping).
        ``sent``: the loop time the claim went out. Each local deadline counts from it,
        not from the reply (docs/concepts/leases.md): the database started the lease
        when it ran the claim, so a slow reply must not move the deadline past it."""
        wall = self._clock.now()
        deadlines, kinds = self._deadlines, self._kinds
        claimed: dict[str, int] = {}
        held_map, put = self._held.by_id, self._held.inbox.put_nowait
        for job in jobs:
            kind = job.kind
            lease, ahead = deadlines[kind]
            held = Held(job, lease, sent + ahead)
            held_map[job.id] = held
            claimed[kind] = claimed.get(kind, 0) + 1
            kinds[kind].pickup.observe(max((wall - job.visible_at).total_seconds(), 0.0))
            if self.trace:
                log.debug("job_claimed", job_id=str(job.id), kind=kind, run_no=job.run_count)
            put(held)
        for kind, n in claimed.items():
            kinds[kind].claimed.inc(n)
        self._held.activated(len(jobs))

    async def _unless_stopped(self, wait: Callable[[], Awaitable[None]]) -> bool:
        """Run one of the claimer's waits, cut short by a stop request: during an outage
        the flush-first wait lasts as long as the outage, and a drain must not."""
        async with anyio.create_task_group() as group:
            async def on_stop() -> None:
                await self._stop.wait()
                group.cancel_scope.cancel()

            group.start_soon(on_stop)
            await wait()
            group.cancel_scope.cancel()
            return True
        return False
