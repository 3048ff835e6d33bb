"""What a committed settlement means to the worker that wrote it: the claim is let go,
the outcome counted and logged, and a job that comes back later arms the timer.

The outcomes themselves (which status, whether the failure budget is spent) are decided
by the store in the settling statement (docs/concepts/lifecycle.md); this reads them back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from ..logs import get_logger
from ..store.base import Outcome, Settled, Settlement
from .held import HeldJobs, HeldState
from .metrics import KindMetrics, WorkerMetrics

log = get_logger("venturi.worker")


@dataclass(frozen=True, slots=True)
class Progress:
    """What a worker has settled since it started, and how many claims it holds now."""

    completed: int
    retried: int
    dead: int
    paused: int
    released: int
    held: int


class Outcomes:
    """Records every committed settle batch. ``wake_at`` arms the worker's timer for a
    local time: a retried or paused job becomes claimable again then. (A periodic job's
    next tick, inserted by the settle of its occurrence, is announced by that statement
    to every worker of the kind, this one included: docs/concepts/periodic.md.)"""

    def __init__(self, held: HeldJobs, metrics: WorkerMetrics,
                 kind_metrics: dict[str, KindMetrics],
                 wake_at: Callable[[dt.datetime], None]) -> None:
        self._held = held
        self._metrics = metrics
        self._kinds = kind_metrics
        self._wake_at = wake_at
        self.trace = False  # log every completion (DEBUG): decided once per run
        self.completed = self.retried = self.dead = self.paused = self.released = 0

    def progress(self) -> Progress:
        return Progress(self.completed, self.retried, self.dead, self.paused, self.released,
                        len(self._held))

    def record(self, batch: list[Settlement], results: list[Settled]) -> None:
        """One committed batch: plain completions take the short path (counted per kind
        once per batch); everything else is logged one by one."""
        completed: dict[str, int] = {}
        held_map = self._held.by_id
        for settlement, result in zip(batch, results, strict=True):
            held = held_map.get(settlement.id)
            if (held is not None and result.outcome is Outcome.COMPLETED and not self.trace
                    and held.state is HeldState.SETTLING and held.run_no == settlement.run_no):
                completed[held.kind] = completed.get(held.kind, 0) + 1
                del held_map[settlement.id]  # settling: nothing to deactivate
            else:
                self._record_one(settlement, result)
        for kind, n in completed.items():
            self._kinds[kind].completed.inc(n)
        self.completed += sum(completed.values())
        self._metrics.in_flight.set(len(held_map))

    def _record_one(self, settlement: Settlement, result: Settled) -> None:
        held = self._held.by_id.get(settlement.id)
        kind = held.kind if held else "?"
        if held is not None and held.run_no != settlement.run_no:
            held = None  # a newer claim of the job (claimed again before this record): not ours
        m = self._metrics
        if not result.applied:
            log.warning("settle_refused", job_id=str(settlement.id), kind=kind,
                        run_no=settlement.run_no, action=settlement.action.value,
                        reason="claim no longer held at this epoch")
            m.lost.labels(kind).inc()
        else:
            outcome = result.outcome
            if outcome is Outcome.COMPLETED:
                self.completed += 1
                if held is not None:
                    self._kinds[kind].completed.inc()
                if self.trace:
                    log.debug("job_completed", job_id=str(settlement.id), kind=kind,
                              run_no=settlement.run_no)
            elif outcome is Outcome.RETRIED:
                self.retried += 1
                m.retried.labels(kind).inc()
                self._wake_at(dt.datetime.now(dt.UTC) + settlement.delay)
                log.info("job_retried", job_id=str(settlement.id), kind=kind,
                         run_no=settlement.run_no, note=settlement.note,
                         retry_in=settlement.delay.total_seconds())
            elif outcome is Outcome.DEAD:
                self.dead += 1
                m.dead.labels(kind).inc()
                log.warning("job_dead", job_id=str(settlement.id), kind=kind,
                            run_no=settlement.run_no, note=settlement.note)
            elif outcome is Outcome.PAUSED:
                self.paused += 1
                m.paused.labels(kind).inc()
                self._wake_at(dt.datetime.now(dt.UTC) + settlement.delay)
                log.debug("job_paused", job_id=str(settlement.id), kind=kind,
                          run_no=settlement.run_no, resume_in=settlement.delay.total_seconds())
            elif outcome is Outcome.RELEASED:
                self.released += 1
                m.released.labels(kind).inc()
                log.info("job_released", job_id=str(settlement.id), kind=kind,
                         run_no=settlement.run_no)
        if held is not None:
            self._held.forget(held, gauge=False)
