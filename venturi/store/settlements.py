"""The records of a worker's side of the storage contract: what it claims with,
settles a run with, renews a lease with, and what recovering a lost claim reports
(docs/concepts/leases.md). What each settle action does to a row is
venturi.store.lifecycle's."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from uuid import UUID

from .statuses import Outcome, Status


class Action(StrEnum):
    """What a finished run asks for. ``FAIL`` retries or, when the budget is
    spent, kills; ``KILL`` kills now (GiveUp, undecodable payload)."""

    COMPLETE = "complete"
    FAIL = "fail"
    KILL = "kill"
    PAUSE = "pause"
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class Settlement:
    """A finished run of one claimed job: what it asks for and its journal entry.

    Applied only while the row is still ``claimed`` by the settling worker at
    claim epoch ``run_no`` (docs/concepts/leases.md, claim epochs); the
    transition ``action`` makes is venturi.store.lifecycle's. ``delay`` is the
    time until the job is visible again (retry backoff, pause); ``carry`` (JSON
    text) is written when ``set_carry``. For a periodic job, ``successor`` is
    the id and visible time of the next occurrence, inserted when this one
    becomes terminal, with ``successor_trace`` (JSON text) as its trace context.
    ``result`` (JSON text) is stored when the job completes (docs/concepts/results.md).
    """

    id: UUID
    run_no: int
    action: Action
    note: str | None = None
    attachment: str | None = None  # JSON text
    delay: dt.timedelta = dt.timedelta(0)
    set_carry: bool = False
    carry: str | None = None
    successor: tuple[UUID, dt.datetime] | None = None
    successor_trace: str | None = None
    result: str | None = None


@dataclass(frozen=True, slots=True)
class Settled:
    """The result of one settlement: whether it applied, and the row's new state."""

    id: UUID
    applied: bool
    status: Status | None = None
    outcome: Outcome | None = None


@dataclass(frozen=True, slots=True)
class LeaseRenewal:
    id: UUID
    run_no: int
    lease: dt.timedelta


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """Claim up to ``limit`` runnable jobs of ``leases``' kinds (kind -> lease).

    ``reserve_low`` / ``reserve_normal`` slots of the batch prefer tier 2 / tier
    1 work (the anti-starvation floor, docs/concepts/priorities.md); a reserved slot its tier cannot
    use falls through to the normal ``priority, visible_at, id`` order.
    """

    claimed_by: str
    leases: Mapping[str, dt.timedelta]
    limit: int
    reserve_normal: int = 0
    reserve_low: int = 0

    def reservations(self) -> tuple[int, int]:
        """(low, normal) slots actually reserved: never more than ``limit`` together,
        low first (it is the tier most easily starved)."""
        low = min(max(self.reserve_low, 0), max(self.limit, 0))
        normal = min(max(self.reserve_normal, 0), max(self.limit, 0) - low)
        return low, normal


@dataclass(frozen=True, slots=True)
class Recovered:
    """A claim taken back from a dead or vanished worker."""

    id: UUID
    kind: str
    run_no: int
    status: Status  # pending again, or dead when the failure budget ran out
    claimed_by: str
