"""The records that cross the storage contract: jobs, journal entries, what enqueue
writes, and what the reading and administering operations take and return.

Payload and carry cross the boundary as JSON text going in and decoded JSON
coming out; types are recovered above this layer, from the kind and the task
registry.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from uuid import UUID

from .statuses import Outcome, Status

# --- records --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One row of ``{prefix}jobs``; ``payload`` and ``carry`` are decoded JSON."""

    id: UUID
    kind: str
    payload: Any
    priority: int
    status: Status
    created_at: dt.datetime
    visible_at: dt.datetime
    claim_expires_at: dt.datetime | None
    claimed_by: str | None
    finished_at: dt.datetime | None
    run_count: int
    failure_count: int
    max_failures: int
    carry: Any
    dedup_key: str | None
    subject: str | None
    periodic: bool
    # The W3C trace context (traceparent, tracestate) of the span that enqueued the
    # job, when tracing was on (docs/operations/tracing.md).
    trace_context: dict[str, str] | None = None
    # The partition of its kind's limits (Task.limit_key(), docs/concepts/flow-control.md).
    limit_key: str | None = None
    # What the completing run gave ``ctx.set_result`` (decoded JSON); None otherwise
    # (docs/concepts/results.md).
    result: Any = None
    # How many of its dependencies (``after=``) have not finished yet; a job waiting
    # for some is pending but not visible (docs/concepts/workflows.md).
    waiting: int = 0

    @property
    def trace_id(self) -> str | None:
        """The trace id of the span that enqueued the job (32 hex digits), or None."""
        carrier = self.trace_context
        parent = carrier.get("traceparent") if isinstance(carrier, dict) else None
        if not isinstance(parent, str):
            return None
        match = _TRACEPARENT.match(parent)
        if match is None or match[1] == "ff" or match[2] == "0" * 32:
            return None
        return match[2]


# W3C Trace Context's traceparent: version-traceid-parentid-flags, lowercase hex.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-|$)")


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One entry of a job's append-only journal."""

    id: int
    job_id: UUID
    kind: str
    run_no: int
    recorded_at: dt.datetime
    outcome: Outcome
    note: str | None
    attachment: Any


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to insert, in storage form (the Queue builds it from a task).

    Visible at ``at`` when given, else ``now + delay``.
    """

    id: UUID
    kind: str
    payload: str  # JSON text
    priority: int = 1
    max_failures: int = 25
    delay: dt.timedelta = dt.timedelta(0)
    at: dt.datetime | None = None
    carry: str | None = None  # JSON text
    dedup_key: str | None = None
    subject: str | None = None
    periodic: bool = False
    trace_context: str | None = None  # JSON text: the enqueuing span's (venturi.tracing)
    limit_key: str | None = None  # the partition of its kind's limits
    # The jobs it waits for (docs/concepts/workflows.md), and whether a failed one
    # counts as finished for it (after_failure="run") instead of failing it.
    after: tuple[UUID, ...] = ()
    run_on_failure: bool = False


@dataclass(frozen=True, slots=True)
class NewJobBatch:
    """Plain jobs to insert, column by column: visible at once, no carry, no dedup key.

    What ``enqueue_many`` builds instead of one :class:`NewJob` per job: a frozen
    record sets each of its fields through ``object.__setattr__``, which cost as
    much as encoding its row. Row ``i`` is ``jobs()[i]``. ``subjects`` None means
    no subject on any row; ``periodic`` None, no periodic row. ``trace_context``
    (JSON text) is every row's: one span sends the whole batch (venturi.tracing).
    """

    ids: list[UUID]
    kinds: list[str]
    payloads: list[str]  # JSON text
    priorities: list[int]
    max_failures: list[int]
    subjects: list[str | None] | None = None
    periodic: list[bool] | None = None
    trace_context: str | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def jobs(self) -> list[NewJob]:
        n = len(self.ids)
        subjects = self.subjects or [None] * n
        periodic = self.periodic or [False] * n
        return [
            NewJob(id=id, kind=kind, payload=payload, priority=priority, max_failures=mf,
                   subject=subject, periodic=per, trace_context=self.trace_context)
            for id, kind, payload, priority, mf, subject, per in zip(
                self.ids, self.kinds, self.payloads, self.priorities, self.max_failures,
                subjects, periodic, strict=True)
        ]


class PlainJob(NamedTuple):
    """The usual job, as ``Store.enqueue_plain`` takes it: visible at once, with no
    column but its task's own (no delay, carry, dedup key, subject, limit key, trace
    context or dependency; not periodic). Row for row what ``job()`` gives
    ``Store.enqueue``; a tuple rather than a frozen record, which costs a single
    enqueue a noticeable part of its client time to build. Its fields are the
    single-row insert's parameters, in order (docs/integrations/producers.md, "One
    job at a time")."""

    id: UUID
    kind: str
    payload: str  # JSON text
    priority: int
    max_failures: int

    def job(self) -> NewJob:
        return NewJob(id=self.id, kind=self.kind, payload=self.payload, priority=self.priority,
                      max_failures=self.max_failures)


@dataclass(frozen=True, slots=True)
class MergeUpdate:
    """What a dedup hit writes into the pending candidate.

    ``payload``/``priority`` None keep the candidate's; ``carry`` is written
    only when ``set_carry`` (so a JSON null carry can be written too).
    """

    payload: str | None = None
    priority: int | None = None
    set_carry: bool = False
    carry: str | None = None


@dataclass(frozen=True, slots=True)
class Enqueued:
    """The result of one enqueue: the surviving job's id and whether it merged."""

    id: UUID
    merged: bool


MergeFn = Callable[[NewJob, JobRecord], "MergeUpdate | None"]
"""Decides how a new job folds into its pending dedup candidate (None: insert it as given)."""


# --- queries -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistoryFilter:
    """Narrow ``query_jobs``; unset fields are unconstrained. Newest first by id
    (UUIDv7, time-ordered); ``before`` is the keyset cursor (exclusive) and
    ``since_id`` the lowest id returned (inclusive): for UUIDv7 ids, a creation time
    range. ``subject`` is a subtree, normalised (no trailing "/")."""

    kind: str | None = None
    status: Status | None = None
    finished_since: dt.datetime | None = None
    finished_until: dt.datetime | None = None
    before: UUID | None = None
    limit: int = 50
    subject: str | None = None
    since_id: UUID | None = None


@dataclass(frozen=True, slots=True)
class KeysetFilter:
    """Narrow ``dead_jobs`` or ``claimed_jobs``, which page in the order of their
    status's own index: dead jobs by ``finished_at`` (most recent first, then id),
    claimed ones by ``claim_expires_at`` (soonest first, then id). ``after`` is the
    keyset cursor, the (time, id) of the previous page's last job; ``since_id`` and
    ``before_id`` bound the ids (inclusive, exclusive)."""

    kind: str | None = None
    after: tuple[dt.datetime, UUID] | None = None
    since_id: UUID | None = None
    before_id: UUID | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class CountFilter:
    """Narrow ``count``. ``since_id``/``before_id`` bound the ids (inclusive,
    exclusive); with ``at_most`` the count stops there (a bounded read)."""

    kind: str | None = None
    subject: str | None = None  # already normalised: no trailing "/"
    statuses: tuple[Status, ...] | None = None
    since_id: UUID | None = None
    before_id: UUID | None = None
    at_most: int | None = None

    @property
    def bounded(self) -> bool:
        return self.since_id is not None or self.before_id is not None


@dataclass(frozen=True, slots=True)
class FinishedMinute:
    """How many jobs of ``kind`` finished (completed, went dead) in the minute
    starting at ``minute`` (UTC, whole minutes), among those still in the table."""

    minute: dt.datetime
    kind: str
    completed: int
    dead: int


@dataclass(frozen=True, slots=True)
class CleanupCriteria:
    """Delete terminal jobs finished strictly before ``finished_before``."""

    finished_before: dt.datetime
    kind: str | None = None
    status: Status | None = None  # COMPLETED or DEAD; None means both
    batch_size: int = 10_000


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Live queue state. ``pending_by_kind`` counts runnable jobs (visible now);
    ``scheduled_by_kind`` the rest; ``oldest_pending_age`` is how long the
    oldest runnable job of each kind has been waiting since it became visible.
    ``completed_by_kind`` and ``dead_by_kind`` count the finished jobs in the table;
    ``completed_total_by_kind`` and ``dead_total_by_kind`` count how many times a
    job of the kind completed or went dead, and never go down when finished jobs
    are deleted (counters: their growth is throughput)."""

    pending_by_kind: dict[str, int] = field(default_factory=dict)
    scheduled_by_kind: dict[str, int] = field(default_factory=dict)
    oldest_pending_age: dict[str, dt.timedelta] = field(default_factory=dict)
    claimed: int = 0
    claimed_by_kind: dict[str, int] = field(default_factory=dict)
    dead_by_kind: dict[str, int] = field(default_factory=dict)
    counts_by_status: dict[str, int] = field(default_factory=dict)
    completed_by_kind: dict[str, int] = field(default_factory=dict)
    completed_total_by_kind: dict[str, int] = field(default_factory=dict)
    dead_total_by_kind: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FailedJob:
    id: UUID
    kind: str
    subject: str | None
    reason: str | None
    finished_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Detail:
    """How far behind the queue is and what is failing in it."""

    oldest_pending_age: dt.timedelta | None
    failed: list[FailedJob]


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One row of ``{prefix}workers``: a live (or recently live) worker."""

    name: str
    boot_id: str
    host: str
    pid: int
    kinds: list[str]
    concurrency: int
    in_flight: int
    started_at: dt.datetime
    last_seen: dt.datetime
    draining: bool = False


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    """A workflow as stored: its steps (name, job id) in the order added, and, read with
    it, the steps' jobs still there and what each waits for (docs/concepts/workflows.md)."""

    id: UUID
    name: str
    created_at: dt.datetime
    steps: list[tuple[str, UUID]]
    jobs: dict[UUID, JobRecord] = field(default_factory=dict)
    after: dict[UUID, list[UUID]] = field(default_factory=dict)
