"""The Queue handle: enqueue, inspect and administer one queue (one prefix).

This module holds the producer's surface (enqueue, workflows, a job and its result);
``queue_views.py`` the operator's reads and ``queue_admin.py`` the operator's actions,
both mixins of :class:`Queue`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

from . import _codec, results, tracing
from ._ids import uuid7, uuid7_many
from .config import DEFAULT_PREFIX
from .errors import InvalidJob
from .newjob import (
    JobBuilder,
    JobLike,
    parse_uuid,
)
from .queue_admin import QueueAdmin
from .queue_views import Page as Page
from .queue_views import QueueViews
from .queue_views import normalize_subject as normalize_subject
from .store.base import (
    Clock,
    Enqueued,
    JobRecord,
    NewJob,
    Status,
    Store,
    WorkflowRecord,
)
from .task import Priority, Task
from .workflow import StepState, Workflow, WorkflowState


class Queue(QueueAdmin, QueueViews):
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
        """Close the store (``connect`` does this on exit). A ``result()`` call still
        waiting raises ``DatabaseUnavailable`` (docs/concepts/results.md)."""
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
        ``ValueError`` before anything is written (docs/concepts/workflows.md). Traced
        like ``enqueue_many``: one ``send`` span, whose context every step stores."""
        steps = workflow.resolved()
        tracer = tracing.tracer()
        if tracer is None:
            return await self._enqueue_workflow(workflow, steps, conn, None)
        kinds = tracing.task_kinds([task for _, task, *_ in steps])
        with tracing.send(tracer, kinds, len(steps)) as send:
            return await self._enqueue_workflow(workflow, steps, conn, send.context)

    async def _enqueue_workflow(self, workflow: Workflow, steps: list[Any], conn: Any,
                                trace_context: str | None) -> UUID:
        jobs = []
        for index, (step, task, after, after_failure, priority) in enumerate(steps):
            try:
                job, _ = self._jobs.new_job(task, index=index, id=step.id, priority=priority,
                                       after=after, after_failure=after_failure,
                                       trace_context=trace_context)
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

    # --- a job and its result ---------------------------------------------------------

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
