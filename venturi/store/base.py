"""The storage contract: the records that cross it and the operations on it.

Everything above this layer (the Queue handle, the worker supervisor, the
CLI) talks to a :class:`Store` and nothing else. Payload and carry cross the
boundary as JSON text going in and decoded JSON coming out; types are
recovered above this layer, from the kind and the task registry.

Two adapters implement it: ``PostgresStore`` (the product) and
``MemoryStore`` (a fake for users' tests). One conformance suite runs against
both (``tests/store/``).

Time is the database's: every operation reads "now" from the store's
:class:`Clock`. The default clock returns ``None``, which means "ask the
database" (``now()``); tests inject a :class:`ManualClock`.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol
from uuid import UUID

from .._codec import json_has_nul
from ..errors import InvalidJob

UTC = dt.UTC


class Status(StrEnum):
    """A job's lifecycle state; the values are the schema's strings."""

    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    DEAD = "dead"

    @property
    def terminal(self) -> bool:
        return self in (Status.COMPLETED, Status.DEAD)


class Outcome(StrEnum):
    """What one journal entry records; the values are the schema's strings."""

    COMPLETED = "completed"
    PAUSED = "paused"
    RETRIED = "retried"
    DEAD = "dead"
    STALE_RECOVERED = "stale-recovered"
    RELEASED = "released"
    MERGED = "merged"
    REDRIVEN = "redriven"

    @property
    def is_execution(self) -> bool:
        """Executions carry run numbers 1..n; merges and redrives annotate."""
        return self not in (Outcome.MERGED, Outcome.REDRIVEN)

    @property
    def is_failure(self) -> bool:
        return self in (Outcome.RETRIED, Outcome.DEAD, Outcome.STALE_RECOVERED)


# --- clocks ---------------------------------------------------------------------


class Clock(Protocol):
    def now(self) -> dt.datetime | None:
        """The current time, or None to let the database decide (``now()``)."""


class DatabaseClock:
    """Production clock: the database's ``now()`` is the only time."""

    def now(self) -> None:
        return None


class ManualClock:
    """A clock under a test's control; PostgreSQL and memory stores both obey it."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = (start or dt.datetime.now(UTC)).astimezone(UTC)

    def now(self) -> dt.datetime:
        return self._now

    def advance(self, delta: dt.timedelta | float) -> dt.datetime:
        if not isinstance(delta, dt.timedelta):
            delta = dt.timedelta(seconds=delta)
        self._now += delta
        return self._now

    def set(self, when: dt.datetime) -> None:
        self._now = when.astimezone(UTC)


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


@dataclass(frozen=True, slots=True)
class NewJobBatch:
    """Plain jobs to insert, column by column: visible at once, no carry, no dedup key.

    What ``enqueue_many`` builds instead of one :class:`NewJob` per job: a frozen
    record sets each of its fields through ``object.__setattr__``, which cost as
    much as encoding its row. Row ``i`` is ``jobs()[i]``. ``subjects`` None means
    no subject on any row; ``periodic`` None, no periodic row.
    """

    ids: list[UUID]
    kinds: list[str]
    payloads: list[str]  # JSON text
    priorities: list[int]
    max_failures: list[int]
    subjects: list[str | None] | None = None
    periodic: list[bool] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def jobs(self) -> list[NewJob]:
        n = len(self.ids)
        subjects = self.subjects or [None] * n
        periodic = self.periodic or [False] * n
        return [
            NewJob(id=id, kind=kind, payload=payload, priority=priority, max_failures=mf,
                   subject=subject, periodic=per)
            for id, kind, payload, priority, mf, subject, per in zip(
                self.ids, self.kinds, self.payloads, self.priorities, self.max_failures,
                subjects, periodic, strict=True)
        ]


def check_new_job_batch(batch: NewJobBatch) -> None:
    """``check_new_jobs`` for a batch, by whole columns: each check runs once over a
    column's distinct values or its joined text; only a batch that fails one is
    checked row by row, to name the offending index."""
    n = len(batch.ids)
    columns: list[Sequence[Any]] = [batch.kinds, batch.payloads, batch.priorities,
                                    batch.max_failures]
    for optional in (batch.subjects, batch.periodic):
        if optional is not None:
            columns.append(optional)
    if any(len(c) != n for c in columns):
        raise ValueError("NewJobBatch columns differ in length")
    payloads = "".join(batch.payloads)
    # map(type, ...) first: a set keeps only one of 1 and True.
    suspect = n > 0 and (
        set(map(type, batch.priorities)) != {int}
        or not set(batch.priorities) <= {0, 1, 2}
        or set(map(type, batch.max_failures)) != {int}
        or min(batch.max_failures) < 1
        or any(_text_problem(k) for k in set(batch.kinds))
        or _text_problem(payloads)
        or "\\u0000" in payloads
        or (batch.subjects is not None
            and _text_problem("".join(s for s in batch.subjects if s is not None)))
    )
    if suspect:
        check_new_jobs(batch.jobs())


def _text_problem(text: str) -> bool:
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_new_jobs(jobs: Sequence[NewJob]) -> None:
    """Refuse, before anything is written, a job the schema would refuse, so both
    stores fail alike: ``InvalidJob`` naming the offending index in a batch."""
    for index, job in enumerate(jobs):
        problem = _new_job_problem(job)
        if problem is not None:
            raise InvalidJob(problem, index=index if len(jobs) > 1 else None)


def _new_job_problem(job: NewJob) -> str | None:
    if isinstance(job.priority, bool) or job.priority not in (0, 1, 2):
        return f"priority {job.priority!r} is out of range: use 0 (high), 1 (normal) or 2 (low)"
    if isinstance(job.max_failures, bool) or not (
            isinstance(job.max_failures, int) and job.max_failures >= 1):
        return f"max_failures {job.max_failures!r} must be an int >= 1"
    for name in ("payload", "carry"):
        value = getattr(job, name)
        if value is not None and json_has_nul(value):
            return f"{name} contains a NUL character, which jsonb cannot store"
    for name in ("kind", "subject", "dedup_key"):
        value = getattr(job, name)
        if value is None:
            continue
        if "\x00" in value:
            return f"{name} contains a NUL character"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{name} is not valid UTF-8 (lone surrogate)"
    return None


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


# --- settlements ------------------------------------------------------------------


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
    """A guarded transition of one claimed job plus its journal entry.

    Applied only while the row is still ``claimed`` by the settling worker at
    claim epoch ``run_no`` (DESIGN rule 4). ``delay`` is the time until the job
    is visible again (retry backoff, pause); ``carry`` (JSON text) is written
    when ``set_carry``. For a periodic job, ``successor`` is the id and visible
    time of the next occurrence, inserted when this one becomes terminal.
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
    1 work (the anti-starvation floor, rule 3); a reserved slot its tier cannot
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


# --- queries -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistoryFilter:
    """Narrow ``query_jobs``; unset fields are unconstrained. Newest first by id
    (UUIDv7, time-ordered); ``before`` is the keyset cursor (exclusive)."""

    kind: str | None = None
    status: Status | None = None
    finished_since: dt.datetime | None = None
    finished_until: dt.datetime | None = None
    before: UUID | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class CountFilter:
    kind: str | None = None
    subject: str | None = None  # already normalised: no trailing "/"
    statuses: tuple[Status, ...] | None = None


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
    oldest runnable job of each kind has been waiting since it became visible."""

    pending_by_kind: dict[str, int] = field(default_factory=dict)
    scheduled_by_kind: dict[str, int] = field(default_factory=dict)
    oldest_pending_age: dict[str, dt.timedelta] = field(default_factory=dict)
    claimed: int = 0
    claimed_by_kind: dict[str, int] = field(default_factory=dict)
    dead_by_kind: dict[str, int] = field(default_factory=dict)
    counts_by_status: dict[str, int] = field(default_factory=dict)


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


# --- the contract -----------------------------------------------------------------------


class Store(abc.ABC):
    """The storage contract. Every state change checks the state it expects."""

    prefix: str
    clock: Clock

    # schema
    @abc.abstractmethod
    async def migrate(self) -> list[str]:
        """Apply pending migrations; return the names applied (none the second time)."""

    # producing
    @abc.abstractmethod
    async def enqueue(
        self, jobs: Sequence[NewJob], *, merge: MergeFn | None = None, conn: Any = None
    ) -> list[Enqueued]:
        """Insert jobs atomically, in input order. Jobs with a ``dedup_key`` are
        merged into their oldest pending candidate (rule 10) via ``merge``."""

    async def enqueue_batch(self, batch: NewJobBatch, *, conn: Any = None) -> None:
        """Insert a plain batch atomically, in order, as ``enqueue(batch.jobs())``
        would (same checks, same errors, same wake-ups); stores override it to skip
        the per-job records."""
        await self.enqueue(batch.jobs(), conn=conn)

    @abc.abstractmethod
    async def dedup_candidate(self, kind: str, dedup_key: str) -> JobRecord | None:
        """The oldest pending job of ``kind`` sharing ``dedup_key``."""

    @abc.abstractmethod
    async def merge_into(
        self, id: UUID, update: MergeUpdate, *, visible_at: dt.datetime | None = None,
        note: str | None = None,
    ) -> bool:
        """Fold a merge into pending job ``id`` and journal it (``merged``).
        ``visible_at`` moves the job earlier, never later. False when ``id`` is
        no longer pending."""

    # working
    @abc.abstractmethod
    async def claim(self, request: ClaimRequest) -> list[JobRecord]:
        """Claim up to ``request.limit`` runnable jobs in one statement (rule 2, 3)."""

    @abc.abstractmethod
    async def settle_many(
        self, claimed_by: str, settlements: Sequence[Settlement]
    ) -> list[Settled]:
        """Apply guarded settlements and their journal entries, atomically, in one
        round trip (rules 4-6, 12). A guard miss writes nothing for that job."""

    async def settle(self, claimed_by: str, settlement: Settlement) -> bool:
        """Apply one guarded settlement; whether it applied."""
        (result,) = await self.settle_many(claimed_by, [settlement])
        return result.applied

    @abc.abstractmethod
    async def extend_leases(
        self, claimed_by: str, renewals: Sequence[LeaseRenewal]
    ) -> set[UUID]:
        """Push the leases of claims still held at their epoch; return their ids."""

    async def extend_lease(self, claimed_by: str, id: UUID, run_no: int,
                           lease: dt.timedelta) -> bool:
        return id in await self.extend_leases(claimed_by, [LeaseRenewal(id, run_no, lease)])

    @abc.abstractmethod
    async def find_stale(self, limit: int = 1000) -> list[JobRecord]:
        """Claimed jobs whose lease has expired (timeout-only detection)."""

    @abc.abstractmethod
    async def recover(self, id: UUID, run_no: int) -> Recovered | None:
        """Re-pend one expired claim at epoch ``run_no``, counting a failure
        (journal ``stale-recovered``, or ``dead`` when the budget is spent)."""

    @abc.abstractmethod
    async def recover_stale(self, limit: int = 1000) -> list[Recovered]:
        """``find_stale`` + ``recover`` for up to ``limit`` jobs, in one statement."""

    @abc.abstractmethod
    async def recover_boot(self, name: str, claimed_by: str) -> list[Recovered]:
        """Re-pend claims of an earlier boot of worker ``name`` (rule 9): every
        claim ``{name}/{other boot}``, counted as a failure like a lease expiry."""

    @abc.abstractmethod
    async def next_visible_at(self, kinds: Sequence[str]) -> dt.datetime | None:
        """The soonest future ``visible_at`` among pending jobs of ``kinds``."""

    @abc.abstractmethod
    async def seed_periodic(self, jobs: Sequence[NewJob]) -> int:
        """Insert periodic occurrences unless one is already pending or claimed."""

    # inspecting
    @abc.abstractmethod
    async def job(self, id: UUID) -> JobRecord | None: ...

    @abc.abstractmethod
    async def journal(self, id: UUID) -> list[JournalRecord]:
        """A job's journal, oldest first."""

    @abc.abstractmethod
    async def query_jobs(self, filter: HistoryFilter) -> list[JobRecord]:
        """Jobs matching ``filter``, newest first, at most ``filter.limit``."""

    @abc.abstractmethod
    async def count(self, filter: CountFilter) -> int: ...

    @abc.abstractmethod
    async def stats(self) -> Snapshot: ...

    @abc.abstractmethod
    async def detail(self, limit: int) -> Detail: ...

    # administering
    @abc.abstractmethod
    async def cancel(
        self, *, ids: Sequence[UUID] | None = None, subject: str | None = None, conn: Any = None
    ) -> int:
        """Delete jobs by id or subject subtree; notify owners of claimed ones (rule 11)."""

    @abc.abstractmethod
    async def retry(self, *, ids: Sequence[UUID] | None = None, kind: str | None = None) -> int:
        """Redrive dead jobs to pending with a fresh failure budget (journal ``redriven``)."""

    @abc.abstractmethod
    async def cleanup(self, criteria: CleanupCriteria) -> int:
        """Delete terminal jobs (their journals go with them); return how many."""

    # workers and control
    @abc.abstractmethod
    async def heartbeat(self, info: WorkerInfo) -> None:
        """Upsert this worker's row in ``{prefix}workers``."""

    @abc.abstractmethod
    async def forget_worker(self, name: str, boot_id: str) -> None: ...

    @abc.abstractmethod
    async def workers(self) -> list[WorkerInfo]: ...

    @abc.abstractmethod
    async def notify_control(self, message: Mapping[str, Any]) -> None:
        """Send a control message (drain, cancel) to every listening worker."""

    @abc.abstractmethod
    def listen(self) -> Listener:
        """A fresh listener on the jobs and control channels."""

    @abc.abstractmethod
    def identity_lock(self, name: str) -> IdentityLock:
        """A lock on worker ``name`` in this queue, held on a dedicated session (rule 9)."""

    @abc.abstractmethod
    async def cleanup_exclusive(self, criteria: CleanupCriteria) -> int | None:
        """One retention batch (at most ``criteria.batch_size`` rows) under a
        try-lock, so one worker at a time does it; None when another holds it."""

    @abc.abstractmethod
    async def db_now(self) -> dt.datetime:
        """The store's current time (the clock's, else the database's)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store is unusable afterwards."""


class IdentityLock(abc.ABC):
    """A worker-name lock that outlives transactions (a session advisory lock).

    Use as an async context manager; ``acquire`` tries once. ``lost`` is set
    when the session holding it ends (the database went away).
    """

    lost: Any

    @abc.abstractmethod
    async def __aenter__(self) -> IdentityLock: ...

    @abc.abstractmethod
    async def __aexit__(self, *exc: object) -> None: ...

    @abc.abstractmethod
    async def acquire(self) -> bool:
        """Try to take the lock (again, after a reconnect); whether we hold it."""

    async def ping(self) -> None:  # noqa: B027 - optional hook
        """Round-trip on the lock's session; sets ``lost`` if the session is gone, so a
        silently dead socket is noticed (the default, for in-process locks, does nothing)."""


class Listener(abc.ABC):
    """Wake-ups from the store: ``("jobs", kind)`` or ``("control", json)``.

    A notification is only a hint; the claim query decides what runs.
    """

    @abc.abstractmethod
    async def __aenter__(self) -> Listener: ...

    @abc.abstractmethod
    async def __aexit__(self, *exc: object) -> None: ...

    @abc.abstractmethod
    async def receive(self) -> tuple[str, str]:
        """The next notification; raises ``DatabaseUnavailable`` when the
        connection drops (the caller reconnects with a fresh listener)."""


AsyncFn = Callable[[], Awaitable[None]]
