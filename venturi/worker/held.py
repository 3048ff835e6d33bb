"""The claims a worker holds, from its claim until its settlement commits.

One :class:`HeldJobs` per worker is shared by the services that touch claims: the
claimer adds them, the slots run them, the renewer keeps their leases, the control
service cancels them, the settlement bookkeeping lets them go. A held job counts
against the worker's capacity (``active``) while it is buffered or running; once its
settlement is queued it is no longer active but stays held, so its lease is still
renewed until the settlement commits (docs/concepts/failures.md, "Losing the database
is not a failure").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ..logs import get_logger
from ..store.base import JobRecord, Settlement
from .metrics import WorkerMetrics
from .runscope import RunScope

log = get_logger("venturi.worker")


class HeldState(enum.Enum):
    BUFFERED = "buffered"  # claimed, waiting for a slot
    RUNNING = "running"  # its handler was started
    SETTLING = "settling"  # its settlement is queued: no longer active, still held


class StopReason(enum.Enum):
    """Why a run was asked to stop; the first reason wins."""

    CANCELLED = "cancelled"  # the job was deleted (docs/concepts/leases.md#cancellation)
    LEASE_LOST = "lease-lost"  # past its local deadline, or renewal found the claim gone
    TIMEOUT = "timeout"  # the task's timeout: a failure
    RELEASE = "release"  # the drain's grace period ended: released, not failed


@dataclass(eq=False, slots=True)
class Held:
    """One claim this worker holds."""

    record: JobRecord
    lease: dt.timedelta
    deadline: float  # loop time: last successful renewal's send time + 2/3 lease
    state: HeldState = HeldState.BUFFERED
    scope: RunScope | None = None
    timeout_at: float = float("inf")  # loop time when the per-task timeout fires
    stop_reason: StopReason | None = None
    started: float = 0.0
    carry: Any = None

    @property
    def id(self) -> UUID:
        return self.record.id

    @property
    def run_no(self) -> int:
        return self.record.run_count

    @property
    def kind(self) -> str:
        return self.record.kind

    def set_deadline(self, deadline: float) -> None:
        self.deadline = deadline  # renewals only move it later: the watcher rescans

    @property
    def due(self) -> float:
        """When this run must stop: its local lease deadline or its timeout."""
        return self.deadline if self.deadline < self.timeout_at else self.timeout_at

    def expire(self, now: float) -> bool:
        """Stop the run if it is due; True if it was."""
        if now < self.due:
            return False
        self.stop(StopReason.TIMEOUT if self.timeout_at <= self.deadline
                  else StopReason.LEASE_LOST)
        return True

    def stop(self, reason: StopReason) -> None:
        """Ask the running handler to stop; the first reason wins."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.scope is not None:
            self.scope.cancel()


class HeldJobs:
    """Every claim of one worker, by job id, and the buffer of those waiting for a slot.

    ``wake`` is called whenever a held job stops being active: a slot is free to claim for
    (``Claimer.room_freed``).
    """

    def __init__(self, metrics: WorkerMetrics, wake: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.by_id: dict[UUID, Held] = {}
        self.inbox: asyncio.Queue[Held] = asyncio.Queue()  # buffered, in claim order
        self.active = 0  # held jobs not yet settling: buffered or running
        self.idle = asyncio.Event()  # set while nothing is active
        self.idle.set()
        self._clock = clock
        self._idle_since = clock()
        self._metrics = metrics
        self._wake = wake

    def __len__(self) -> int:
        return len(self.by_id)

    def holds(self, held: Held) -> bool:
        """Whether ``held`` is still ours (not cancelled, lost or settled meanwhile)."""
        return self.by_id.get(held.id) is held

    def count(self, state: HeldState) -> int:
        return sum(h.state is state for h in self.by_id.values())

    def stop_running(self, reason: StopReason) -> None:
        for held in list(self.by_id.values()):
            if held.state is HeldState.RUNNING:
                held.stop(reason)

    def idle_for(self) -> float:
        """Seconds since the last active job ended, 0 while one is active: how long the
        slots have had nothing to run (``Prefetch.claimed``)."""
        return self._clock() - self._idle_since if self.active == 0 else 0.0

    def oldest_start(self) -> Iterator[float]:
        """When the oldest run going on started (nothing when none is). Slots take jobs
        from one FIFO inbox in the order they were claimed, and ``by_id`` keeps that
        order, so the first running job found is the oldest (to within a slot's hop):
        the scan stops there instead of walking every held job before each claim, which
        was 2-4 % of a 200-slot worker's CPU."""
        for held in self.by_id.values():
            if held.state is HeldState.RUNNING and held.started:
                yield held.started
                return

    def activated(self, count: int) -> None:
        """``count`` claims were just added to ``by_id`` and the inbox."""
        self.active += count
        self.idle.clear()
        self._metrics.in_flight.set(len(self.by_id))

    def settling(self, held: Held) -> None:
        """``held``'s settlement is queued: it no longer takes a slot."""
        if held.state is not HeldState.SETTLING:
            held.state = HeldState.SETTLING
            self._deactivate()

    def _deactivate(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle_since = self._clock()
            self.idle.set()
        self._wake()

    def forget(self, held: Held, gauge: bool = True) -> None:
        """Stop holding ``held`` (settled, lost or cancelled). Only that claim: the job may
        have been claimed again meanwhile (a pause with no delay, a recovered lease), and
        that newer claim stays held."""
        if held.state is not HeldState.SETTLING:
            held.state = HeldState.SETTLING
            self._deactivate()
        if self.by_id.get(held.id) is held:
            del self.by_id[held.id]
        if gauge:
            self._metrics.in_flight.set(len(self.by_id))

    def abandon(self, held: Held) -> None:
        """The run ended without a settlement: its claim was lost or the job cancelled."""
        if held.stop_reason is StopReason.CANCELLED:
            log.info("job_cancelled", job_id=str(held.id), kind=held.kind, run_no=held.run_no)
        else:
            log.warning("lease_lost", job_id=str(held.id), kind=held.kind, run_no=held.run_no)
            self._metrics.lost.labels(held.kind).inc()
        self.forget(held)

    def dropped(self, settlement: Settlement) -> None:
        """The database refused this settlement on its own (the settler logged it): stop
        holding the job; its lease expires and the reaper recovers it."""
        held = self.by_id.get(settlement.id)
        if held is not None and held.run_no == settlement.run_no:
            self._metrics.lost.labels(held.kind).inc()
            self.forget(held)
