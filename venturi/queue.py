"""The Queue handle: enqueue, inspect and administer one queue (one prefix)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from . import _codec, _pages, results, tracing
from ._ids import uuid7, uuid7_many
from .config import DEFAULT_PREFIX
from .errors import ConfigError, InvalidJob
from .newjob import (
    JobBuilder,
    JobLike,
    parse_uuid,
)
from .notices import InvalidNotice, drain_message
from .store.base import (
    CleanupCriteria,
    Clock,
    CountFilter,
    Detail,
    Enqueued,
    FinishedMinute,
    HistoryFilter,
    JobRecord,
    JournalRecord,
    KeysetFilter,
    KindChange,
    KindState,
    NewJob,
    Rate,
    Snapshot,
    Status,
    Store,
    WorkerInfo,
    WorkflowRecord,
)
from .store.flow import check_concurrency
from .task import Priority, Task
from .workflow import StepState, Workflow, WorkflowState

_FOREVER = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)


_KEEP: Any = object()  # set_limits: leave this limit as it is


@dataclass(frozen=True, slots=True)
class Page:
    """One page of history, newest first; pass ``next_cursor`` as ``before=``."""

    jobs: list[JobRecord]
    next_cursor: str | None


def _status(value: Status | str, what: str = "status") -> Status:
    try:
        return Status(value)
    except ValueError:
        raise ValueError(
            f"{what} {value!r} is not one of {', '.join(s.value for s in Status)}"
        ) from None


def normalize_subject(subject: str) -> str:
    """Strip trailing ``/``: ``file:///a/`` names the same subtree as ``file:///a``."""
    if not isinstance(subject, str):
        raise TypeError("subject must be a string")
    stripped = subject.rstrip("/")
    if not stripped.strip():
        raise ValueError("subject is empty after stripping '/': refusing to match every job")
    return stripped


class Queue:
    """A handle on one queue. Cheap to share; safe for concurrent use.

    Open one with ``async with Queue.connect(dsn) as queue`` (PostgreSQL) or
    ``Queue(MemoryStore())`` in tests; ``venturi.SyncQueue`` is its blocking twin.

    ``conn=`` (on enqueue, enqueue_many, cancel and the reads) runs the statements
    on a connection of the caller's, in its open transaction: an asyncpg
    ``Connection``, a psycopg ``AsyncConnection``, or a SQLAlchemy
    ``AsyncConnection``/``AsyncSession`` (docs/integrations/producers.md).
    """

    def __init__(self, store: Store, *, max_payload_bytes: int = _codec.DEFAULT_MAX_PAYLOAD_BYTES):
        self.store = store
        self._jobs = JobBuilder(max_payload_bytes, self._now)
        self._waiters: results.Waiters | None = None  # result()'s, made on first use

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload (and result) one job may carry, in bytes of UTF-8 JSON."""
        return self._jobs.max_payload_bytes

    @property
    def prefix(self) -> str:
        """The table prefix naming this queue (``venturi_`` by default)."""
        return self.store.prefix

    def _now(self) -> dt.datetime:
        return self.store.clock.now() or dt.datetime.now(dt.UTC)

    @staticmethod
    @asynccontextmanager
    async def connect(
        dsn: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        min_size: int = 1,
        max_size: int = 10,
        pooler: bool = False,
        listen_dsn: str | None = None,
        clock: Clock | None = None,
        max_payload_bytes: int = _codec.DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> AsyncIterator[Queue]:
        """Open a pool on ``dsn`` for the queue named by ``prefix``; closed on exit.

        ``min_size``/``max_size`` bound the connection pool. ``pooler=True``
        turns asyncpg's statement cache off, for PgBouncer in transaction mode;
        ``listen_dsn`` then names a direct connection to PostgreSQL for LISTEN
        and the worker's identity lock. ``max_payload_bytes`` caps one job's
        payload. ``clock`` is for tests (``ManualClock``).
        """
        from .store.postgres import PostgresStore

        store = await PostgresStore.connect(
            dsn, prefix=prefix, min_size=min_size, max_size=max_size, pooler=pooler,
            listen_dsn=listen_dsn, clock=clock,
        )
        queue = Queue(store, max_payload_bytes=max_payload_bytes)
        try:
            yield queue
        finally:
            await queue.close()

    async def close(self) -> None:
        """Close the store (``connect`` does this on exit)."""
        if self._waiters is not None:
            await self._waiters.close()
        await self.store.close()

    async def migrate(self) -> list[str]:
        """Apply pending schema migrations; returns the ones applied."""
        return await self.store.migrate()

    # --- enqueue ------------------------------------------------------------------------

    async def enqueue(
        self,
        task: Task,
        *,
        delay: dt.timedelta | None = None,
        at: dt.datetime | None = None,
        priority: Priority | int | str | None = None,
        after: Sequence[UUID | str] | None = None,
        after_failure: str = "fail",
        conn: Any = None,
    ) -> Enqueued:
        """Enqueue one task. With ``conn=`` (the caller's connection or session:
        docs/integrations/producers.md) the insert joins the caller's transaction
        and workers are notified at its commit. With ``after=`` (job ids) it waits,
        pending and not claimable, until every one of them has completed; one that
        dies or is cancelled fails it (``dependency-failed``) unless
        ``after_failure="run"`` (docs/concepts/workflows.md)."""
        tracer = tracing.tracer()
        if tracer is None:
            if (delay is None and at is None and priority is None and after is None
                    and after_failure == "fail"):
                # The usual call: a plain task and no option, one insert with no
                # decision left to make (docs/integrations/producers.md, "One job at
                # a time"). Any other takes the general path below.
                plain = self._jobs.plain_job(task)
                if plain is not None:
                    await self.store.enqueue_plain(plain, conn=conn)
                    return Enqueued(plain.id, False)
            return await self._enqueue(task, delay, at, priority, conn, None, after,
                                       after_failure)
        with tracing.send(tracer, tracing.task_kinds([task])) as send:
            result = await self._enqueue(task, delay, at, priority, conn, send, after,
                                         after_failure)
            send.sent([result])
        return result

    async def _enqueue(self, task: Task, delay: dt.timedelta | None, at: dt.datetime | None,
                       priority: Priority | int | str | None, conn: Any,
                       send: tracing.Send | None, after: Sequence[UUID | str] | None = None,
                       after_failure: str = "fail") -> Enqueued:
        job, task = self._jobs.new_job(task, delay=delay, at=at, priority=priority,
                                  trace_context=None if send is None else send.context,
                                  after=after, after_failure=after_failure)
        merge = self._jobs.merge_fn({job.id: task}) if job.dedup_key is not None else None
        if merge is not None and send is not None:
            merge = send.merging(merge)
        (result,) = await self.store.enqueue([job], merge=merge, conn=conn)
        return result

    async def enqueue_many(self, tasks: Sequence[JobLike], *, conn: Any = None) -> list[UUID]:
        """Enqueue a batch atomically (one statement without dedup keys). Returns
        ids in input order; a merged item returns the surviving job's id. One bad
        item rejects the whole batch, naming its index."""
        tracer = tracing.tracer()
        if tracer is None:
            return await self._enqueue_many(tasks, conn, None)
        with tracing.send(tracer, tracing.task_kinds(tasks), len(tasks)) as send:
            return await self._enqueue_many(tasks, conn, send)

    async def _enqueue_many(self, tasks: Sequence[JobLike], conn: Any,
                            send: tracing.Send | None) -> list[UUID]:
        trace_context = None if send is None else send.context
        batch = self._jobs.plain_batch(tasks, trace_context)
        if batch is not None:
            await self.store.enqueue_batch(batch, conn=conn)
            return batch.ids
        new_job = self._jobs.new_job
        jobs: list[NewJob] = []
        as_tasks: list[Task] = []
        for index, (item, id) in enumerate(zip(tasks, uuid7_many(len(tasks)), strict=True)):
            job, task = new_job(item, index=index, id=id, trace_context=trace_context)
            jobs.append(job)
            as_tasks.append(task)
        merge = None
        if any(job.after for job in jobs) and any(job.dedup_key is not None for job in jobs):
            raise InvalidJob("a batch with Dependent items cannot also merge by dedup key: "
                             "enqueue those separately")
        if any(job.dedup_key is not None for job in jobs):
            merge = self._jobs.merge_fn(
                {job.id: task for job, task in zip(jobs, as_tasks, strict=True)})
            if send is not None:
                merge = send.merging(merge)
        results = await self.store.enqueue(jobs, merge=merge, conn=conn)
        if send is not None:
            send.sent(results)
        return [r.id for r in results]

    async def enqueue_workflow(self, workflow: Workflow, *, conn: Any = None) -> UUID:
        """Enqueue every step of ``workflow`` and its record in one transaction (the
        caller's with ``conn=``); its id. A cycle, an unknown step or a bad task is a
        ``ValueError`` before anything is written (docs/concepts/workflows.md)."""
        steps = workflow.resolved()
        jobs = []
        for index, (step, task, after, after_failure, priority) in enumerate(steps):
            try:
                job, _ = self._jobs.new_job(task, index=index, id=step.id, priority=priority,
                                       after=after, after_failure=after_failure)
            except InvalidJob as exc:
                raise InvalidJob(f"step {step.name!r}: {exc.reason}") from None
            jobs.append(job)
        if any(job.dedup_key is not None for job in jobs):
            raise InvalidJob("workflow steps cannot have dedup keys")
        record = WorkflowRecord(uuid7(), workflow.name, self._now(),
                                [(step.name, step.id) for step, *_ in steps])
        await self.store.enqueue_workflow(record, jobs, conn=conn)
        return record.id

    async def workflow(self, id: UUID | str, *, conn: Any = None) -> WorkflowState | None:
        """Every step of workflow ``id`` as it is now, in the order added (None for an
        unknown workflow)."""
        found = await self.store.workflow(parse_uuid(id, what="workflow id"), conn=conn)
        if found is None:
            return None
        return WorkflowState(found.id, found.name, found.created_at, [
            StepState(name, step, sorted(found.after.get(step, [])), found.jobs.get(step))
            for name, step in found.steps])

    async def workflow_of(self, job: UUID | str) -> UUID | None:
        """The id of the workflow ``job`` is a step of, or None (the dashboard links a
        job's page to its workflow's with it)."""
        return await self.store.workflow_of(parse_uuid(job))

    # --- inspect ------------------------------------------------------------------------

    async def job(self, id: UUID | str, *, conn: Any = None) -> JobRecord | None:
        """The job's row, or None if there is no such job (any more)."""
        return await self.store.job(parse_uuid(id), conn=conn)

    async def result(self, id: UUID | str, *,
                     timeout: dt.timedelta | float | None = None,  # noqa: ASYNC109 - contract
                     ) -> Any:
        """The job's result (what its completing run gave ``ctx.set_result``; None if
        it set none) once it has completed, waiting up to ``timeout`` (seconds or a
        timedelta; None waits as long as it takes). Raises ``venturi.JobFailed`` (its
        ``reason``: the dead entry's note) if the job died, ``venturi.JobCancelled`` if
        it no longer exists, ``TimeoutError`` when the time is up. Woken by a
        notification the finishing transaction sends, never by polling
        (docs/concepts/results.md)."""
        job_id = parse_uuid(id)
        seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
        if seconds is not None and seconds < 0:
            raise ValueError("timeout must be >= 0")
        # A job already finished stays so: answered at once, without listening (and
        # so even with timeout=0).
        job = await self.store.job(job_id)
        if not results.finished(job):
            if self._waiters is None:
                self._waiters = results.Waiters(self.store)
            async with asyncio.timeout(seconds):
                job = await self._waiters.wait(job_id)
        journal = await self.store.journal(job_id) if job is not None \
            and job.status is Status.DEAD else []
        return results.outcome(job_id, job, journal)

    async def journal(self, id: UUID | str, *, conn: Any = None) -> list[JournalRecord]:
        """The job's journal, oldest entry first (empty for an unknown job)."""
        return await self.store.journal(parse_uuid(id), conn=conn)

    async def stats(self, *, conn: Any = None) -> Snapshot:
        """Counts per kind and status, and how long the oldest runnable job has waited."""
        return await self.store.stats(conn=conn)

    async def detail(self, limit: int = 20, *, conn: Any = None) -> Detail:
        """The oldest runnable job's age and the ``limit`` newest dead jobs with their reasons."""
        if limit < 0:
            raise ValueError("limit must be >= 0")
        return await self.store.detail(limit, conn=conn)

    async def history(
        self,
        *,
        kind: str | None = None,
        status: Status | str | None = None,
        finished_since: dt.datetime | None = None,
        finished_until: dt.datetime | None = None,
        before: str | UUID | None = None,
        limit: int = 50,
        subject: str | None = None,
        created_since: dt.datetime | None = None,
        created_until: dt.datetime | None = None,
        conn: Any = None,
    ) -> Page:
        """Jobs newest first, one keyset page at a time. ``subject``: its subtree, as
        ``count`` and ``cancel`` read it. ``created_since``/``created_until``: by the
        creation time the ids carry (the producer's clock at enqueue, to the
        millisecond), which makes them ranges of the primary key."""
        _check_limit(limit)
        cursor = None if before is None else parse_uuid(before, what="cursor")
        since_id, cursor = _pages.id_range(created_since, created_until, cursor)
        rows = await self.store.query_jobs(HistoryFilter(
            kind=kind, status=None if status is None else _status(status),
            finished_since=finished_since, finished_until=finished_until,
            before=cursor, limit=limit + 1,
            subject=None if subject is None else normalize_subject(subject), since_id=since_id,
        ), conn=conn)
        return _page(rows, limit, lambda j: str(j.id))

    async def dead_jobs(
        self, *, kind: str | None = None, before: str | None = None, limit: int = 50,
        created_since: dt.datetime | None = None, created_until: dt.datetime | None = None,
        conn: Any = None,
    ) -> Page:
        """Dead jobs, the most recently dead first, one page at a time (pass
        ``next_cursor`` as ``before=``). Read in the order of the dead jobs' own
        index, so a page costs its own rows however many jobs completed."""
        return _page(await self.store.dead_jobs(self._keyset(
            kind, before, limit, created_since, created_until), conn=conn), limit,
            lambda j: _pages.time_cursor(j.finished_at, j.id))

    async def claimed_jobs(
        self, *, kind: str | None = None, after: str | None = None, limit: int = 50,
        created_since: dt.datetime | None = None, created_until: dt.datetime | None = None,
        conn: Any = None,
    ) -> Page:
        """Claimed (running) jobs, the soonest lease expiry first, one page at a time
        (pass ``next_cursor`` as ``after=``). A renewal moves a job's expiry, so a job
        renewed between two pages can appear on both or neither."""
        return _page(await self.store.claimed_jobs(self._keyset(
            kind, after, limit, created_since, created_until), conn=conn), limit,
            lambda j: _pages.time_cursor(j.claim_expires_at, j.id))

    @staticmethod
    def _keyset(kind: str | None, cursor: str | None, limit: int,
                since: dt.datetime | None, until: dt.datetime | None) -> KeysetFilter:
        _check_limit(limit)
        since_id, before_id = _pages.id_range(since, until)
        return KeysetFilter(kind=kind, after=_pages.parse_time_cursor(cursor),
                            since_id=since_id, before_id=before_id, limit=limit + 1)

    async def periodic_jobs(self, *, conn: Any = None) -> list[JobRecord]:
        """Each periodic kind's pending or claimed occurrence (its next run), by kind."""
        return await self.store.periodic_jobs(conn=conn)

    async def finished_per_minute(
        self, since: dt.datetime, until: dt.datetime | None = None, *, limit: int = 100_000,
        conn: Any = None,
    ) -> list[FinishedMinute]:
        """Jobs finished from ``since`` to ``until`` (default: now), per minute and
        kind, oldest minute first; of the jobs still in the table, at most the
        ``limit`` most recently finished are read (a bounded cost, however busy the
        queue), so when ``limit`` is reached the oldest minute is partial."""
        if since.tzinfo is None or (until is not None and until.tzinfo is None):
            raise ValueError("since and until must be timezone-aware")
        if limit < 1:
            raise ValueError("limit must be >= 1")
        return await self.store.finished_per_minute(since, until or _FOREVER, limit, conn=conn)

    async def count(
        self,
        *,
        kind: str | None = None,
        subject: str | None = None,
        statuses: Sequence[Status | str] | None = None,
        created_since: dt.datetime | None = None,
        created_until: dt.datetime | None = None,
        at_most: int | None = None,
        conn: Any = None,
    ) -> int:
        """Jobs of ``kind`` and/or in ``subject``'s subtree, in ``statuses`` (any by
        default), created in ``[created_since, created_until)`` if given. With
        ``at_most``, counting stops there: a bounded read for a page that only needs
        to know whether there are more."""
        if at_most is not None and at_most < 0:
            raise ValueError("at_most must be >= 0")
        since_id, before_id = _pages.id_range(created_since, created_until)
        return await self.store.count(CountFilter(
            kind=kind,
            subject=None if subject is None else normalize_subject(subject),
            statuses=None if statuses is None else tuple(_status(s) for s in statuses),
            since_id=since_id, before_id=before_id, at_most=at_most,
        ), conn=conn)

    async def workers(self) -> list[WorkerInfo]:
        """The workers registered on this queue, with their last heartbeat."""
        return await self.store.workers()

    async def drain(
        self, worker: str | None = None, *, grace: dt.timedelta | float | None = None
    ) -> None:
        """Ask worker ``worker`` (every worker of this queue when None) to drain: stop
        claiming, let running jobs finish within ``grace`` (each worker's own when
        None), release the rest and exit. Returns once the request is sent; watch
        :meth:`workers` to see them go."""
        seconds = grace.total_seconds() if isinstance(grace, dt.timedelta) else grace
        try:
            message = drain_message(worker, seconds)
        except InvalidNotice as exc:
            raise ValueError(str(exc)) from None
        await self.store.notify_control(message)

    # --- flow control (docs/concepts/flow-control.md) --------------------------------------

    async def pause(self, kind: str) -> None:
        """Claim no more jobs of ``kind`` on any worker (within about a second; running
        ones finish); its jobs stay pending and enqueues still work."""
        await self.store.control_kind(KindChange(_kind(kind), paused=True))

    async def resume(self, kind: str) -> None:
        """Undo :meth:`pause`."""
        await self.store.control_kind(KindChange(_kind(kind), paused=False))

    async def set_limits(self, kind: str, *, concurrency: int | object | None = _KEEP,
                         rate: str | Rate | object | None = _KEEP) -> None:
        """Set the operator's limits of ``kind``, overriding its task class's until
        cleared with None; a limit not given is left as it is."""
        if concurrency is _KEEP and rate is _KEEP:
            raise ValueError("set_limits() needs concurrency= and/or rate=")
        try:
            conc = None if concurrency in (None, _KEEP) else check_concurrency(concurrency)
            per = None if rate in (None, _KEEP) else Rate.parse(rate)  # type: ignore[arg-type]
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        await self.store.control_kind(KindChange(
            _kind(kind), set_concurrency=concurrency is not _KEEP, concurrency=conc,
            set_rate=rate is not _KEEP, rate=per))

    async def kinds(self) -> list[KindState]:
        """Every kind a worker declared (as it started) or an operator controlled, or
        with claimed jobs: paused, the limits in force and where each comes from,
        pending and claimed counts, and what holds it back (``KindState.held``)."""
        return await self.store.kind_states()

    # --- administer ------------------------------------------------------------------------

    async def cancel(
        self,
        *,
        ids: Sequence[UUID | str] | None = None,
        subject: str | None = None,
        workflow: UUID | str | None = None,
        conn: Any = None,
    ) -> int:
        """Delete jobs by id, every job in ``subject``'s subtree, or the unfinished steps
        of ``workflow``. Running ones are cancelled by their workers; side effects are
        not undone (docs/concepts/leases.md#cancellation)."""
        given = sum(x is not None for x in (ids, subject, workflow))
        if given == 0:
            raise ValueError("cancel() needs ids=, subject= or workflow=")
        if given > 1:
            raise ValueError("cancel() takes one of ids=, subject= or workflow=")
        if workflow is not None:
            found = await self.store.workflow(parse_uuid(workflow, what="workflow id"), conn=conn)
            if found is None:
                return 0
            return await self.store.cancel(ids=[step for _, step in found.steps], conn=conn,
                                           unfinished=True)
        if ids is not None:
            return await self.store.cancel(ids=[parse_uuid(i) for i in ids], conn=conn)
        return await self.store.cancel(subject=normalize_subject(subject or ""), conn=conn)

    async def retry(
        self,
        *,
        ids: Sequence[UUID | str] | None = None,
        kind: str | None = None,
        status: Status | str = Status.DEAD,
    ) -> int:
        """Redrive dead jobs: back to pending, fresh failure budget, journal ``redriven``."""
        if _status(status) is not Status.DEAD:
            raise ValueError("only dead jobs can be retried (status='dead')")
        if ids is None and kind is None:
            raise ValueError("retry() needs ids= or kind=")
        if ids is not None:
            return await self.store.retry(ids=[parse_uuid(i) for i in ids])
        return await self.store.retry(kind=kind)

    async def cleanup(
        self,
        *,
        finished_before: dt.datetime,
        kind: str | None = None,
        status: Status | str | None = None,
    ) -> int:
        """Delete finished jobs (and their journals) older than ``finished_before``."""
        st = None if status is None else _status(status)
        if st is not None and not st.terminal:
            raise ValueError("cleanup only removes finished jobs: status must be completed or dead")
        if finished_before.tzinfo is None:
            raise ValueError("finished_before must be timezone-aware")
        return await self.store.cleanup(CleanupCriteria(finished_before, kind, st))


def _kind(kind: str) -> str:
    if not isinstance(kind, str) or not kind or kind != kind.strip():
        raise ValueError(f"kind {kind!r} must be a non-empty string without surrounding spaces")
    return kind


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= 10_000:
        raise ValueError("limit must be between 1 and 10000")


def _page(rows: list[JobRecord], limit: int, cursor: Any) -> Page:
    """A page of at most ``limit`` of ``rows`` (read one more than that: whether
    there is a next page); ``cursor(job)`` names the last one."""
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, cursor(rows[-1]) if more else None)


