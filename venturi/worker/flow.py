"""Flow control in the worker: which kinds to claim by the limited claim, which to skip
while paused, and telling the other workers when this one frees budget
(docs/concepts/flow-control.md).

The store decides: every claim reads ``{prefix}kinds`` and the plain claim never takes a
paused or limited kind, so what this object believes can only be late, never unsafe.
It re-reads the rows in the background, never on the claim's path (an idle worker's
pickup waits for no extra round trip): when a ``kinds`` control message names one of its
kinds, after the LISTEN session reconnects, and every ``refresh_interval`` seconds in
any case. A re-read that finds a row changed wakes the claimer
(docs/concepts/flow-control.md, "When a change takes effect").

A limited kind whose claim came back short is *blocked*: the claimer skips its claim
until something can have freed budget (a wake-up of one of its kinds on the jobs
channel, which settlements of limited kinds send; the rate window's timer; a change of
its controls; the fallback poll). So a saturated kind costs no claim per slot that frees
for the other kinds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from functools import partial

import anyio

from ..store.base import JobRecord, KindState, LimitedClaim, Limits, Store
from .health import DatabaseHealth
from .metrics import WorkerMetrics


class Flow:
    def __init__(self, store: Store, code: Mapping[str, Limits], db: DatabaseHealth,
                 metrics: WorkerMetrics, refresh_interval: float,
                 wake: Callable[[], None]) -> None:
        self._store = store
        self._metrics = metrics
        self._held_since: dict[str, float] = {}  # kind -> loop time it was found held back
        self._code = dict(code)
        self._db = db
        self._refresh_interval = refresh_interval
        self._wake = wake  # the claimer should look for work
        self.limited: frozenset[str] = frozenset(k for k, v in code.items() if v.any)
        self.paused: frozenset[str] = frozenset()
        self._rows: dict[str, KindState] = {}  # as last read
        self._reread = asyncio.Event()  # re-read the rows now (refresher, run())
        self.blocked = False  # the last limited claim came back short: wait for a wake-up
        self.wakeups = 0  # unblocks so far: what came while a claim was out (claimed_short)
        self._retry_at: float | None = None  # loop time a rate window frees budget
        self._freed: set[str] = set()  # limited kinds this worker settled, to announce
        # Limited kinds near their limit as this worker last claimed them: only their
        # settlements are announced (a kind far from its limit has nobody waiting).
        self._binding: set[str] = set()
        self._announce = asyncio.Event()

    # --- what the claimer asks -----------------------------------------------------------

    def split(self, leases: Mapping[str, dt.timedelta]
              ) -> tuple[dict[str, dt.timedelta], dict[str, dt.timedelta]]:
        """(plain kinds, limited kinds) of ``leases``, paused kinds left out, and the
        limited ones left out too while blocked."""
        plain: dict[str, dt.timedelta] = {}
        limited: dict[str, dt.timedelta] = {}
        if self.blocked and self._retry_at is not None \
                and anyio.current_time() >= self._retry_at:
            self.unblock()
        for kind, lease in leases.items():
            if kind in self.paused:
                continue
            if kind in self.limited:
                if not self.blocked:
                    limited[kind] = lease
            else:
                plain[kind] = lease
        return plain, limited

    def claimed_short(self, retry_at_local: dt.datetime | None, sent_at_wakeup: int) -> None:
        """The limited claim took fewer than it asked for: block until a wake-up, or
        until ``retry_at_local`` (a rate window frees budget then). Not if a wake-up came
        while it was out (``wakeups`` moved since ``sent_at_wakeup``): a settlement that
        freed budget may have committed after the claim's snapshot and announced itself
        before the claim returned, and that announcement is the wake-up the block would
        wait for."""
        if self.wakeups != sent_at_wakeup:
            return
        self.blocked = True
        self._retry_at = None
        if retry_at_local is not None:
            delay = (retry_at_local - dt.datetime.now(dt.UTC)).total_seconds()
            self._retry_at = anyio.current_time() + max(delay, 0.0)

    @property
    def announcing(self) -> bool:
        """Whether settlements may have budget to announce (a kind near its limit)."""
        return bool(self._binding)

    def with_room(self, kinds: Iterable[str]) -> list[str]:
        """The kinds of ``kinds`` not paused and, if limited, not near their limit as the
        last claim found them: those whose runnable jobs a claim could take."""
        return [k for k in kinds if k not in self.paused and k not in self._binding]

    @property
    def waiting(self) -> bool:
        """Blocked until a rate window frees budget (runnable work is waiting for it)."""
        return self.blocked and self._retry_at is not None

    def observe(self, got: LimitedClaim, plain: list[JobRecord]) -> None:
        """After a claim: which limited kinds are near their limit (their settlements
        are announced), what held kinds back, and how long a held kind waited once it is
        claimed again (``venturi_kind_limited_total``,
        ``venturi_kind_limited_wait_seconds``)."""
        near = got.near | {kind for kind, _ in got.held}
        self._binding -= {j.kind for j in got.jobs} - near
        self._binding |= near
        now = anyio.current_time()
        for kind, why in got.held:
            self._metrics.kind_limited.labels(kind, why).inc()
            self._held_since.setdefault(kind, now)
        if self._held_since:
            for job in (*got.jobs, *plain):
                since = self._held_since.pop(job.kind, None)
                if since is not None:
                    self._metrics.kind_limited_wait.labels(job.kind).observe(now - since)

    def unblock(self) -> None:
        self.wakeups += 1
        self.blocked = False
        self._retry_at = None

    async def declare(self) -> None:
        """At boot: record the code's limits of every kind served (the last worker to
        start wins), then read the rows."""
        await self._store.declare_kinds(self._code)
        await self.refresh()

    async def refresh(self) -> bool:
        """Re-read the kinds' rows; whether they changed since the last read."""
        rows = await self._store.kind_controls(sorted(self._code))
        return self._apply(rows)

    def _apply(self, rows: Iterable[KindState]) -> bool:
        # Only the controls: kind_controls reports no counts, but a store may.
        by_kind = {r.kind: r for r in rows}
        controls = {k: (r.paused, r.operator, r.code) for k, r in by_kind.items()}
        changed = controls != {k: (r.paused, r.operator, r.code) for k, r in self._rows.items()}
        self._rows = by_kind
        limited, paused = set(), set()
        for kind, code in self._code.items():
            row = by_kind.get(kind)
            if row is not None and row.paused:
                paused.add(kind)
            if code.any or (row is not None and row.limits.any):
                limited.add(kind)
        now = anyio.current_time()
        for kind in paused - self.paused:
            self._metrics.kind_limited.labels(kind, "paused").inc()
            self._held_since.setdefault(kind, now)
        self.limited, self.paused = frozenset(limited), frozenset(paused)
        self.unblock()
        return changed

    # --- what the other services tell it -------------------------------------------------

    def changed(self, kinds: Iterable[str]) -> None:
        """A ``kinds`` control message: re-read now if it names one of ours."""
        if any(k in self._code for k in kinds):
            self._reread.set()

    def reconnected(self) -> None:
        """The LISTEN session reconnected: control messages may have been lost."""
        self._reread.set()

    def woken(self, kind: str) -> None:
        """A wake-up of ``kind`` on the jobs channel."""
        if kind in self.limited:
            self.unblock()

    def settled(self, kinds: Iterable[str]) -> None:
        """This worker settled jobs of these kinds: announce those near their limit."""
        freed = [k for k in kinds if k in self._binding]
        if freed:
            self._freed.update(freed)
            self._announce.set()

    async def run(self) -> None:
        """Announce freed budget (batched: what settles while one announcement is in
        flight goes in the next), and re-read the rows (``_refresher``)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._refresher)
            while True:
                await self._announce.wait()
                self._announce.clear()
                kinds, self._freed = sorted(self._freed), set()
                await self._db.retry("flow", partial(self._store.wake_kinds, kinds))

    async def _refresher(self) -> None:
        """Re-read the rows on a control message or a reconnect, and every
        ``refresh_interval`` seconds; a change wakes the claimer, which claims with the
        new view (a resume or a raised limit frees work). The claim never waits for a
        re-read: until it lands, the claim statement's own read of the rows rules."""
        while True:
            with anyio.move_on_after(self._refresh_interval):
                await self._reread.wait()
            self._reread.clear()
            if await self._db.retry("flow", self.refresh):
                self._wake()
