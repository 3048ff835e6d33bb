"""What makes a worker look for work: LISTEN, the visibility timer, the fallback poll.

A NOTIFY is only a hint: the claim decides what runs. ``{prefix}jobs`` wake-ups say
which kind has runnable work, or when the earliest delayed job of a kind becomes
visible (``venturi/notices.py``); the timer fires exactly then, and a bounded poll
covers notifications lost while LISTEN was down (docs/design-notes.md, "Timer
wake-ups"). Each sets ``claim_wanted``, the claimer's event: a wake-up sets it in the
LISTEN connection's own callback (``Listener.on_arrival``), so that the claimer is the
next task to run (docs/concepts/flow-control.md, "When a change takes effect", for the
control messages).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from ..errors import DatabaseUnavailable
from ..logs import get_logger
from ..notices import parse_job_notice
from ..store.base import Store
from .clock import DbClock
from .health import DatabaseHealth, Health
from .identity import Identity
from .metrics import WorkerMetrics

log = get_logger("venturi.worker")

LISTEN_PING_INTERVAL = 10.0


class VisibilityTimer:
    """Sets ``claim_wanted`` when the earliest delayed job of ``kinds`` becomes visible."""

    def __init__(self, store: Store, kinds: Sequence[str], clock: DbClock, db: DatabaseHealth,
                 claim_wanted: asyncio.Event) -> None:
        self._store = store
        self._kinds = list(kinds)
        self._clock = clock
        self._db = db
        self._claim_wanted = claim_wanted
        self._target: float | None = None  # loop time
        self._changed = asyncio.Event()
        self._recompute = True

    def wake_at(self, when: dt.datetime) -> None:
        """Fire at ``when`` (local UTC) if that is earlier than the current target."""
        delay = (when - dt.datetime.now(dt.UTC)).total_seconds()
        target = anyio.current_time() + max(delay, 0.0)
        if self._target is None or target < self._target:
            self._target = target
            self._changed.set()

    def wake_at_db_time(self, when: dt.datetime) -> None:
        self.wake_at(self._clock.to_local(when))

    def recompute(self) -> None:
        """Ask the store for the next visible time again: what the timer knew may be
        stale (a claim came back short, a periodic job was seeded, LISTEN reconnected)."""
        self._recompute = True
        self._changed.set()

    async def run(self) -> None:
        while True:
            if self._recompute:
                self._recompute = False
                nxt = await self._db.retry(
                    "timer", lambda: self._store.next_visible_at(self._kinds))
                if nxt is not None:
                    self.wake_at_db_time(nxt)
            self._changed.clear()
            timeout = None
            if self._target is not None:
                timeout = max(self._target - anyio.current_time(), 0.0)
            with anyio.move_on_after(timeout):
                await self._changed.wait()
            if self._target is not None and anyio.current_time() >= self._target:
                self._target = None
                self._recompute = True
                self._claim_wanted.set()


class Waker:
    """LISTEN for wake-ups of ``kinds`` and for control messages (handed to
    ``on_control``), on a dedicated connection that reconnects with backoff."""

    def __init__(self, store: Store, kinds: Sequence[str], identity: Identity, health: Health,
                 db: DatabaseHealth, metrics: WorkerMetrics, timer: VisibilityTimer,
                 claim_wanted: asyncio.Event, on_control: Callable[[str], None],
                 on_kind: Callable[[str], None] | None = None,
                 on_reconnect: Callable[[], None] | None = None) -> None:
        self._store = store
        self._kinds = frozenset(kinds)
        self._identity = identity
        self._health = health
        self._db = db
        self._metrics = metrics
        self._timer = timer
        self._claim_wanted = claim_wanted
        self._on_control = on_control
        self._on_kind = on_kind  # every wake-up of one of our kinds (flow.py)
        self._on_reconnect = on_reconnect  # control messages may have been lost (flow.py)

    async def run(self) -> None:
        connected_before = False
        while True:
            try:
                async with self._store.listen() as listener:
                    listener.on_arrival(self._on_arrival)
                    self._health.listening = True
                    if connected_before:
                        log.info("waker_reconnected", worker=self._identity.name)
                        self._metrics.waker_reconnects.inc()
                        if self._on_reconnect is not None:
                            self._on_reconnect()
                    connected_before = True
                    self._db.recovered("waker")
                    self._timer.recompute()
                    self._claim_wanted.set()  # notifications may have been lost meanwhile
                    await self._listen(listener)
            except DatabaseUnavailable:
                self._health.listening = False
                await self._db.back_off("waker")

    async def _listen(self, listener: Any) -> None:
        ping = getattr(listener, "ping", None)
        while True:
            with anyio.move_on_after(LISTEN_PING_INTERVAL) as idle:
                channel, payload = await listener.receive()
            if idle.cancelled_caught:
                if ping is not None:
                    await ping()  # a silently dead socket shows up here
                continue
            if channel == "jobs":  # a listener that does not call on_arrival's hook
                self._on_job_notice(payload)
            elif channel == "control":
                self._on_control(payload)

    def _on_arrival(self, channel: str, payload: str) -> bool:
        """In the LISTEN connection's callback: a wake-up is handled there, the claimer's
        event set without a switch to this service's task; control messages go on to
        ``receive`` (their handling may be longer)."""
        if channel != "jobs":
            return False
        self._on_job_notice(payload)
        return True

    def _on_job_notice(self, payload: str) -> None:
        notice = parse_job_notice(payload)
        if notice.kind not in self._kinds:
            return
        if notice.due is None:
            if self._on_kind is not None:
                self._on_kind(notice.kind)
            self._claim_wanted.set()
            return
        self._timer.wake_at_db_time(notice.due)


class Poller:
    """The bounded fallback: look for work every ``interval`` seconds (every second at
    most while LISTEN is down)."""

    def __init__(self, interval: float, health: Health, claim_wanted: asyncio.Event,
                 on_tick: Callable[[], None] | None = None) -> None:
        self._interval = interval
        self._health = health
        self._claim_wanted = claim_wanted
        self._on_tick = on_tick  # a blocked limited claim tries again too (flow.py)

    async def run(self) -> None:
        while True:
            listening = self._health.listening
            await anyio.sleep(self._interval if listening else min(self._interval, 1.0))
            if not listening and self._health.listening:
                # LISTEN came up meanwhile (the boot's first wait, a reconnection): the
                # waker looked for work then, and the full interval starts now.
                continue
            if self._on_tick is not None:
                self._on_tick()
            self._claim_wanted.set()
