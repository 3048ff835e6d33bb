"""The storage contract: the operations on a queue's storage.

Everything above this layer (the Queue handle, the worker, the CLI) talks to a
:class:`Store` and nothing else. The records that cross it live in
``records``, ``settlements`` and ``statuses``, the dedicated sessions it hands
out (Listener, IdentityLock, Maintenance) in ``sessions``, the clocks in
``clocks``, the checks every store runs on new jobs in ``checks``; this module
re-exports them, so ``venturi.store.base`` names the whole contract.

Two adapters implement it: ``PostgresStore`` (the product) and
``MemoryStore`` (a fake for users' tests). Both pass one conformance suite,
shipped as ``venturi.testing`` so that another adapter or a user's own fake
can run it too (docs/testing.md).
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from .checks import check_new_job_batch, check_new_jobs, check_plain_job
from .clocks import UTC, Clock, DatabaseClock, ManualClock
from .flow import KindChange, KindState, LimitedClaim, Limits, Rate
from .records import (
    CleanupCriteria,
    CountFilter,
    Detail,
    Enqueued,
    FailedJob,
    FinishedMinute,
    HistoryFilter,
    JobRecord,
    JournalRecord,
    KeysetFilter,
    MergeFn,
    MergeUpdate,
    NewJob,
    NewJobBatch,
    PlainJob,
    Snapshot,
    WorkerInfo,
    WorkflowRecord,
)
from .sessions import ArrivalHook, IdentityLock, Listener, Maintenance
from .settlements import Action, ClaimRequest, LeaseRenewal, Recovered, Settled, Settlement
from .statuses import Outcome, Status

__all__ = [
    "UTC",
    "Action",
    "ArrivalHook",
    "AsyncFn",
    "ClaimRequest",
    "CleanupCriteria",
    "Clock",
    "CountFilter",
    "DatabaseClock",
    "Detail",
    "Enqueued",
    "FailedJob",
    "FinishedMinute",
    "HistoryFilter",
    "IdentityLock",
    "JobRecord",
    "JournalRecord",
    "KeysetFilter",
    "KindChange",
    "KindState",
    "LeaseRenewal",
    "LimitedClaim",
    "Limits",
    "Listener",
    "Maintenance",
    "ManualClock",
    "MergeFn",
    "MergeUpdate",
    "NewJob",
    "NewJobBatch",
    "Outcome",
    "PlainJob",
    "Rate",
    "Recovered",
    "Settled",
    "Settlement",
    "Snapshot",
    "Status",
    "Store",
    "WorkerInfo",
    "WorkflowRecord",
    "check_new_job_batch",
    "check_new_jobs",
    "check_plain_job",
]


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
        merged into their oldest pending candidate via ``merge``
        (docs/concepts/dedup.md)."""

    async def enqueue_batch(self, batch: NewJobBatch, *, conn: Any = None) -> None:
        """Insert a plain batch atomically, in order, as ``enqueue(batch.jobs())``
        would (same checks, same errors, same wake-ups); stores override it to skip
        the per-job records."""
        await self.enqueue(batch.jobs(), conn=conn)

    async def enqueue_plain(self, job: PlainJob, *, conn: Any = None) -> None:
        """Insert one plain job (``PlainJob``), as ``enqueue([job.job()])`` would (same
        checks, same errors, same wake-up): ``Queue.enqueue``'s path for the usual task.
        Stores override it to skip the general path's decisions
        (docs/integrations/producers.md, "One job at a time")."""
        await self.enqueue([job.job()], conn=conn)

    @abc.abstractmethod
    async def enqueue_workflow(self, workflow: WorkflowRecord, jobs: Sequence[NewJob], *,
                               conn: Any = None) -> None:
        """Insert a workflow's steps (``jobs``, some waiting for others) and its record,
        atomically (docs/concepts/workflows.md)."""

    @abc.abstractmethod
    async def workflow(self, id: UUID, *, conn: Any = None) -> WorkflowRecord | None:
        """The workflow, with its steps' jobs still there and their edges."""

    @abc.abstractmethod
    async def workflow_of(self, job: UUID) -> UUID | None:
        """The workflow ``job`` is a step of, or None: only jobs in a dependency graph
        (with an edge either way) are looked for, the rest cost one index read."""

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
        """Claim up to ``request.limit`` runnable jobs in one statement
        (docs/concepts/priorities.md)."""

    async def prepare_claims(self, request: ClaimRequest) -> None:
        """Get ready to claim for ``request``'s kinds, claiming nothing: a booting
        worker calls it while it takes its name's lock, which it must hold before its
        first claim (docs/concepts/leases.md, "Restarts: boot recovery"). A store whose
        claims run on sessions of their own opens one and plans the claim there; by
        default, nothing."""
        return None

    async def runnable_left(self, kinds: Sequence[str]) -> bool:
        """Whether a job of ``kinds`` is runnable now (pending, visible, of a kind not
        paused; a limited kind counts, whatever its budget), even one another
        transaction holds locked. A claim skips those, so an empty claim does not prove
        there is nothing left: a drain to empty asks this before it ends, of its plain
        kinds and the limited ones its last claim found with room. By default False,
        right for a store whose claims never skip a runnable job."""
        return False

    @abc.abstractmethod
    async def claim_limited(self, request: ClaimRequest) -> LimitedClaim:
        """Claim up to ``request.limit`` runnable jobs of limited kinds, within what
        their concurrency and rate leave, per ``limit_key`` partition, in the order and
        with the reserved slots of ``claim`` (docs/concepts/flow-control.md). Paused
        kinds are left out. Correct under any number of concurrent claimers."""

    @abc.abstractmethod
    async def settle_many(
        self, claimed_by: str, settlements: Sequence[Settlement]
    ) -> list[Settled]:
        """Apply guarded settlements and their journal entries, atomically, in one
        round trip (venturi.store.lifecycle). A guard miss writes nothing for that job."""

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
        (journal ``stale-recovered``, or ``dead`` when the budget is spent). Like
        every operation that makes a job pending, the three recoveries wake idle
        workers of its kind (the jobs channel)."""

    @abc.abstractmethod
    async def recover_stale(self, limit: int = 1000) -> list[Recovered]:
        """``find_stale`` + ``recover`` for up to ``limit`` jobs, in one statement."""

    @abc.abstractmethod
    async def recover_boot(self, name: str, claimed_by: str) -> list[Recovered]:
        """Re-pend claims of an earlier boot of worker ``name`` (docs/concepts/leases.md):
        every claim ``{name}/{other boot}``, counted as a failure like a lease expiry."""

    @abc.abstractmethod
    async def next_visible_at(self, kinds: Sequence[str]) -> dt.datetime | None:
        """The soonest future ``visible_at`` among pending jobs of ``kinds``."""

    @abc.abstractmethod
    async def seed_periodic(self, jobs: Sequence[NewJob]) -> int:
        """Insert periodic occurrences unless one is already pending or claimed."""

    # inspecting: with ``conn=``, read on the caller's connection (what its open
    # transaction sees), as the writes that take it do
    @abc.abstractmethod
    async def job(self, id: UUID, *, conn: Any = None) -> JobRecord | None: ...

    @abc.abstractmethod
    async def watch_job(self, id: UUID) -> JobRecord | None:
        """``job``, and the job flagged as awaited: a settle that finishes it from now on
        (or that was finishing it meanwhile and committed after this read) announces it
        on the results channel (``listen_finished``); settles announce no other job.
        What ``Queue.result`` reads while it waits (docs/concepts/results.md)."""

    @abc.abstractmethod
    async def results(self, ids: Sequence[UUID]) -> dict[UUID, Any]:
        """The results of those of ``ids`` that completed, by id (docs/concepts/results.md)."""

    @abc.abstractmethod
    async def dependencies(self, id: UUID) -> list[UUID]:
        """The jobs job ``id`` was enqueued after (``after=``), by id."""

    @abc.abstractmethod
    async def journal(self, id: UUID, *, conn: Any = None) -> list[JournalRecord]:
        """A job's journal, oldest first."""

    @abc.abstractmethod
    async def query_jobs(self, filter: HistoryFilter, *, conn: Any = None) -> list[JobRecord]:
        """Jobs matching ``filter``, newest first, at most ``filter.limit``."""

    @abc.abstractmethod
    async def dead_jobs(self, filter: KeysetFilter, *, conn: Any = None) -> list[JobRecord]:
        """Dead jobs, most recently finished first (``finished_at`` descending, then
        id ascending), after ``filter.after``; at most ``filter.limit``."""

    @abc.abstractmethod
    async def claimed_jobs(self, filter: KeysetFilter, *, conn: Any = None) -> list[JobRecord]:
        """Claimed jobs, soonest lease expiry first (``claim_expires_at``, then id),
        after ``filter.after``; at most ``filter.limit``."""

    @abc.abstractmethod
    async def periodic_jobs(self, *, conn: Any = None) -> list[JobRecord]:
        """Every periodic kind's pending or claimed occurrence, by kind."""

    @abc.abstractmethod
    async def finished_per_minute(self, since: dt.datetime, until: dt.datetime, limit: int, *,
                                  conn: Any = None) -> list[FinishedMinute]:
        """Jobs finished in ``[since, until)``, per minute and kind, oldest first,
        counting at most the ``limit`` most recently finished."""

    @abc.abstractmethod
    async def count(self, filter: CountFilter, *, conn: Any = None) -> int: ...

    @abc.abstractmethod
    async def stats(self, *, conn: Any = None) -> Snapshot:
        """Counts without reading the finished jobs: pending and claimed jobs by their
        indexes, finished ones from counts kept as they change (sql/0006_tallies.sql)."""

    @abc.abstractmethod
    async def detail(self, limit: int, *, conn: Any = None) -> Detail: ...

    # administering
    @abc.abstractmethod
    async def cancel(
        self, *, ids: Sequence[UUID] | None = None, subject: str | None = None, conn: Any = None,
        unfinished: bool = False,
    ) -> int:
        """Delete jobs by id or subject subtree; notify owners of claimed ones
        (docs/concepts/leases.md, cancellation). ``unfinished``: only those of ``ids``
        still pending or claimed."""

    @abc.abstractmethod
    async def retry(self, *, ids: Sequence[UUID] | None = None, kind: str | None = None) -> int:
        """Redrive dead jobs to pending with a fresh failure budget (journal ``redriven``)."""

    @abc.abstractmethod
    async def cleanup(self, criteria: CleanupCriteria) -> int:
        """Delete terminal jobs (their journals go with them); return how many."""

    # flow control (docs/concepts/flow-control.md)
    @abc.abstractmethod
    async def control_kind(self, change: KindChange) -> None:
        """Apply an operator's pause, resume or limits to a kind, and tell every worker
        (the control channel's ``kinds`` message)."""

    @abc.abstractmethod
    async def declare_kinds(self, limits: Mapping[str, Limits]) -> None:
        """Record the code's limits of these kinds (a starting worker's task classes);
        workers are told when that changed anything."""

    @abc.abstractmethod
    async def kind_controls(self, kinds: Sequence[str] | None = None) -> list[KindState]:
        """The recorded controls of ``kinds`` (all when None), by kind; counts not read."""

    @abc.abstractmethod
    async def wake_kinds(self, kinds: Sequence[str]) -> None:
        """Tell idle workers of ``kinds`` to claim (a wake-up per kind on the jobs
        channel): a worker settled jobs of limited kinds, so budget is free."""

    @abc.abstractmethod
    async def kind_states(self) -> list[KindState]:
        """Every kind with a row (controls, or declared by a worker) or pending or
        claimed jobs: controls, counts, and what holds it back (``KindState.held``), by kind."""

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
    def listen_finished(self) -> Listener:
        """A fresh listener on the results channel: ``("finished", ids)`` whenever jobs
        complete, go dead or are cancelled (venturi/notices.py), sent by the
        transaction that finished them, at its commit (docs/concepts/results.md). A
        settle announces only the jobs flagged by ``watch_job``; a recovery, a cancel
        and a failed dependency announce every job they finish."""

    @abc.abstractmethod
    def identity_lock(self, name: str) -> IdentityLock:
        """A lock on worker ``name`` in this queue, held on a dedicated session
        (docs/concepts/leases.md, restarts)."""

    def maintenance(self) -> Maintenance | None:
        """A session for the queue's own vacuum (venturi/maintenance.py), or None where
        the store needs none (the default: nothing to vacuum)."""
        return None

    @abc.abstractmethod
    async def cleanup_exclusive(self, criteria: CleanupCriteria) -> int | None:
        """One retention batch (at most ``criteria.batch_size`` rows) under a
        try-lock, so one worker at a time does it; None when another holds it."""

    @abc.abstractmethod
    async def db_now(self) -> dt.datetime:
        """The store's current time (the clock's, else the database's)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store is unusable afterwards."""


AsyncFn = Callable[[], Awaitable[None]]
