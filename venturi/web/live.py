"""Live updates: one LISTEN and one stats refresh per dashboard, shared by every
browser watching it, pushed as server-sent events.

A NOTIFY on the queue's channels (new work, a cancel, a drain) marks the view
stale; completions send none, so while anyone watches the stats are also
refreshed every ``refresh`` seconds. Refreshes are at least ``min_gap`` apart
whatever the notification rate, and with nobody watching only the chart
samples are taken (every ``sample_interval``). The stats read the pending and
claimed jobs, so with a large backlog one refresh takes a while
(docs/operations/dashboard.md has the figures): the period stretches to
:data:`COST_FACTOR` times the last refresh's duration, so one dashboard never
keeps the database busy more than a tenth of the time. Whatever a page's stream needs
beyond the stats (the workers table, one job) is read once per refresh and
shared through :meth:`Hub.cached`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from venturi.errors import VenturiError
from venturi.logs import get_logger
from venturi.queue import Queue
from venturi.store.records import Snapshot

from .samples import BACKFILL_ROWS, WINDOW, Samples

log = get_logger("venturi.web")
T = TypeVar("T")
KEEPALIVE = 15.0
COST_FACTOR = 10.0


class Hub:
    def __init__(self, queue: Queue, *, refresh: float, sample_interval: float,
                 min_gap: float = 0.5) -> None:
        self.queue = queue
        self.refresh_every = refresh
        self.min_gap = min_gap
        self.samples = Samples(sample_interval)
        self.version = 0
        self.snapshot: Snapshot | None = None
        self.db_error: str | None = None
        self.listening = False
        self._changed: asyncio.Event | None = None
        self._dirty: asyncio.Event | None = None
        self._closing: asyncio.Event | None = None
        self._watchers = 0
        self._cache: dict[Any, asyncio.Task[Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._last_refresh = -1e9
        self.cost = 0.0  # seconds the last stats refresh took

    # --- lifecycle: started by the first request, on the server's event loop --------

    def ensure_started(self) -> None:
        if self._tasks:
            return
        self._changed, self._dirty, self._closing = (asyncio.Event(), asyncio.Event(),
                                                     asyncio.Event())
        self._tasks = [asyncio.create_task(self._listen(), name="venturi-web-listen"),
                       asyncio.create_task(self._refresh_loop(), name="venturi-web-refresh")]

    def close_streams(self) -> None:
        """End every open event stream (a server shutting down waits for them)."""
        if self._closing is not None:
            self._closing.set()
            self._bump()

    @property
    def closing(self) -> bool:
        return self._closing is not None and self._closing.is_set()

    async def aclose(self) -> None:
        self.close_streams()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            # asyncio.wait, not an await of each with CancelledError suppressed: that
            # also swallowed a cancel of the caller's own (a shutdown's deadline).
            await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: the loops log their own errors

    # --- the shared state --------------------------------------------------------------

    async def current(self) -> Snapshot:
        """The latest snapshot, read now if none was taken yet."""
        if self.snapshot is None:
            await self.refresh()
        if self.snapshot is None:
            raise VenturiError(self.db_error or "the queue's stats are unavailable")
        return self.snapshot

    def periods(self) -> tuple[float, float]:
        """(refresh period, minimum gap) in seconds, stretched by the refresh's cost."""
        stretch = COST_FACTOR * self.cost
        return max(self.refresh_every, stretch), max(self.min_gap, stretch)

    async def refresh(self) -> None:
        self._last_refresh = started = time.monotonic()
        try:
            snap = await self.queue.stats()
            self.cost = time.monotonic() - started
        except VenturiError as exc:
            if self.db_error is None:
                log.warning("dashboard_db_unavailable", error=type(exc).__name__)
            self.db_error = "the database is unreachable; showing the last known state"
            self._bump()
            return
        if self.db_error is not None:
            log.info("dashboard_db_available")
        self.db_error = None
        self.snapshot = snap
        mono = time.monotonic()
        if self.samples.due(mono):
            self.samples.add(snap, at=time.time(), mono=mono)
        if not self.samples.backfilled:
            await self._backfill()
        self._bump()

    async def _backfill(self) -> None:
        """The charts' hour before this dashboard started, once (samples.py)."""
        start = time.time()
        since = dt.datetime.fromtimestamp(start - WINDOW, dt.UTC)
        try:
            minutes = await self.queue.finished_per_minute(since, limit=BACKFILL_ROWS)
        except VenturiError:
            return  # the next refresh tries again
        self.samples.backfill(minutes, limit=BACKFILL_ROWS, start=start)

    def _bump(self) -> None:
        self.version += 1
        self._cache.clear()
        if self._changed is not None:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def cached(self, key: Any, read: Callable[[], Awaitable[T]]) -> T:
        """``read()`` once per refresh however many streams ask; a stream that goes
        away while it runs does not cancel it for the others."""
        task = self._cache.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.ensure_future(read())
            self._cache[key] = task
        result: T = await asyncio.shield(task)
        return result

    # --- watching ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[None]:
        self.ensure_started()
        self._watchers += 1
        assert self._dirty is not None
        self._dirty.set()
        try:
            yield
        finally:
            self._watchers -= 1

    async def changed_since(self, version: int, wait: float = KEEPALIVE) -> bool:
        """Wait until the state is newer than ``version``; False on timeout."""
        if self.version != version:
            return True
        changed = self._changed
        if changed is None:
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):  # not wait_for: see _wait_for_reason
                await changed.wait()
        return self.version != version

    # --- background tasks ------------------------------------------------------------

    async def _listen(self) -> None:
        assert self._dirty is not None
        backoff = 0.5
        while True:
            try:
                async with self.queue.store.listen() as listener:
                    self.listening = True
                    backoff = 0.5
                    self._dirty.set()  # notices may have been missed while away
                    while True:
                        await listener.receive()
                        self._dirty.set()
            except VenturiError as exc:
                if self.listening:
                    log.warning("dashboard_listen_lost", error=type(exc).__name__)
                self.listening = False
            except Exception as exc:
                log.error("dashboard_listen_failed", error=type(exc).__name__,
                          traceback=_traceback(exc))
                self.listening = False
            await asyncio.sleep(backoff)  # reconnect backoff, capped like the worker's
            backoff = min(backoff * 2, 5.0)

    async def _refresh_loop(self) -> None:
        assert self._dirty is not None
        while True:
            try:
                await self._wait_for_reason()
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug: say so, keep the pages up on the last state
                log.error("dashboard_refresh_failed", error=type(exc).__name__,
                          traceback=_traceback(exc))
                await asyncio.sleep(self.refresh_every)

    async def _wait_for_reason(self) -> None:
        """Return when a refresh is due: a notice or the period while watched, the
        next chart sample otherwise; never sooner than ``min_gap`` after the last."""
        assert self._dirty is not None
        while True:
            now = time.monotonic()
            period, min_gap = self.periods()
            gap = self._last_refresh + min_gap - now
            if gap > 0:
                await asyncio.sleep(gap)  # rate limit under a flood of notices
                continue
            last = self.samples.last
            sample_at = (last.mono + self.samples.interval) if last else now
            watched = self._watchers > 0
            due = min(sample_at, self._last_refresh + period) if watched else sample_at
            if due <= now or (watched and self._dirty.is_set()):
                self._dirty.clear()
                return
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for returns the wait's
            # result when a notice sets it in the step that cancels this task (aclose),
            # drops the cancel, and the loop went on for ever (CPython gh-86296).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(due - now):
                    await self._dirty.wait()
            if not watched:
                self._dirty.clear()  # a notice alone is not worth a refresh unwatched


def _traceback(exc: BaseException) -> str:
    # Text, not exc_info: a renderer showing local variables would print payloads.
    return "".join(traceback.format_exception(exc)).rstrip()


def sse(event: str, data: str) -> str:
    """One server-sent event; every line of ``data`` gets its own ``data:`` field."""
    lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"
