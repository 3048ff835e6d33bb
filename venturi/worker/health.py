"""What a worker reports to its probes, and how its services ride out a lost database.

Losing the database is not a crash (docs/concepts/failures.md, "Losing the database is
not a failure"): every service that reaches the database goes through one
:class:`DatabaseHealth`, which logs ``db_unavailable`` once per outage, reports
not-ready, backs off (doubling, capped by ``WorkerConfig.max_backoff``) and reports the
recovery on the first success, which ends every other service's back-off at once: they
try again as soon as one of them got through. Any other exception is a bug and ends the
worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from prometheus_client import Counter

from ..errors import CONFLICT_PAUSE, DatabaseConflict, DatabaseUnavailable, classify
from ..logs import get_logger

log = get_logger("venturi.worker")

T = TypeVar("T")


class GaveUp(Exception):
    """A retry was given up: a stop was requested while it waited for the database."""


class Health:
    """What ``/healthz`` and ``/readyz`` report."""

    def __init__(self) -> None:
        self.alive = False
        self.db_ok = False
        self.listening = False
        self.draining = False

    @property
    def ready(self) -> bool:
        return self.alive and self.db_ok and self.listening and not self.draining


class DatabaseHealth:
    """The database as every service of one worker sees it.

    ``flush_pending`` is set by every outage: finished runs' settlements were buffered
    meanwhile, and the claimer and the reaper write them before their first statement
    after the reconnect (``Settler.flushed_after_outage``).
    """

    def __init__(self, health: Health, lost: Counter, max_backoff: float) -> None:
        self._health = health
        self._lost = lost  # counts outages
        self._cap = max_backoff
        self._down_since: float | None = None
        self._back = asyncio.Event()  # set when an outage ends: every back-off ends with it
        self.flush_pending = False

    async def back_off(self, service: str, until: asyncio.Event | None = None) -> bool:
        """``service`` could not reach the database: log it once per outage, report
        not ready, and wait before its next try: less when another service reports the
        database back meanwhile, or when ``until`` is set. False when ``until`` cut the
        wait short."""
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._back.clear()
            log.warning("db_unavailable", service=service)
            self._lost.inc()
        self._health.db_ok = False
        self.flush_pending = True
        down = time.monotonic() - self._down_since
        delay = min(0.1 * 2 ** min(down, 10), self._cap)
        with anyio.move_on_after(delay):
            await _first_of(self._back, until)
        return until is None or not until.is_set()

    def recovered(self, service: str) -> None:
        """``service`` reached the database: the outage, if there was one, is over."""
        if self._down_since is not None:
            log.info("db_available", service=service,
                     outage_seconds=round(time.monotonic() - self._down_since, 3))
            self._down_since = None
            # The others try again now, not at the end of their back-off (up to the cap):
            # a worker cut off while it was idle would otherwise claim nothing for seconds
            # after the network healed.
            self._back.set()
        self._health.db_ok = True

    async def retry(self, service: str, call: Callable[[], Awaitable[T]],
                    until: asyncio.Event | None = None) -> T:
        """``await call()`` until it gets through, backing off while the database is lost,
        and again shortly after a call that lost a race (a deadlock or a serialization
        failure: rolled back whole, to be tried again, never a reason to stop the worker).
        With ``until``, gives up (raises :class:`GaveUp`) when it is set during a back-off."""
        while True:
            try:
                result = await call()
            except DatabaseUnavailable:
                if not await self.back_off(service, until):
                    raise GaveUp(service) from None
                continue
            except DatabaseConflict as exc:
                log.info("db_conflict_retried", service=service, error=classify(exc))
                await anyio.sleep(CONFLICT_PAUSE)
                continue
            self.recovered(service)
            return result


async def _first_of(*events: asyncio.Event | None) -> None:
    """Until one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events if e is not None]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
