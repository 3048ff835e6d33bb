"""``VenturiBackend``: a ``django.tasks`` backend that writes venturi jobs on Django's
own connection (docs/integrations/django.md).

``TASKS = {"default": {"BACKEND": "venturi.contrib.django.VenturiBackend",
"OPTIONS": {"prefix": "venturi_"}}}``. ``.enqueue()`` inserts the job through
Django's connection in the calling thread, so it commits or rolls back with the
surrounding ``transaction.atomic()``, and outside one it is a single autocommitted
insert. ``.aenqueue()`` and ``.aget_result()`` are Django's own: the sync method in
``sync_to_async(thread_sensitive=True)``, on the same connection as the async
view's ORM calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core import checks
from django.db import connections, transaction
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from ... import _codec, tracing
from ..._ids import uuid7
from ...newjob import MAX_DELAY
from ...store.base import Enqueued, NewJob
from ...store.postgres import PostgresStore
from ...sync import SyncQueue, run_blocking
from .driver import DjangoDriver
from .jobs import kind_for, payload, queue_name_problem, queue_of, tier
from .options import BackendOptions, max_failures_problem
from .results import to_result


@dataclass(frozen=True, slots=True, kw_only=True)
class VenturiTask(Task):
    """Django's Task with venturi's failure budget: ``@task(max_failures=3)`` lets a
    task function fail twice and be run again before it is FAILED; None takes the
    backend's ``OPTIONS["max_failures"]`` (1 unless set)."""

    max_failures: int | None = None


class VenturiBackend(BaseTaskBackend):
    """Durable Django tasks in venturi's tables, run by ``venturi worker --django``."""

    task_class = VenturiTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.config = BackendOptions.parse(alias, params.get("OPTIONS", {}))
        if not self.queues:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['QUEUES'] is empty: VenturiBackend needs its queues "
                "named (each is a kind its workers claim)")
        for name in sorted(self.queues):
            problem = queue_name_problem(name)
            if problem:
                raise InvalidTaskBackend(f"TASKS[{alias!r}]['QUEUES']: {problem}")
        # Django keeps the raw OPTIONS dict in self.options; self.config is it validated.
        self.prefix = self.config.prefix
        self.database = self.config.database
        self.queue = SyncQueue(PostgresStore(DjangoDriver(self.database, prefix=self.prefix),
                                             prefix=self.prefix))

    # --- what venturi can honour ---------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        budget = getattr(task, "max_failures", None)
        if budget is not None:
            problem = max_failures_problem(budget)
            if problem:
                raise InvalidTask(f"max_failures {problem}")
        if task.run_after is not None and task.run_after - timezone.now() > MAX_DELAY:
            raise InvalidTask(f"run_after is more than {MAX_DELAY.days} days away")

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        errors: list[checks.CheckMessage] = []
        if self.database not in settings.DATABASES:
            errors.append(checks.Error(
                f"TASKS[{self.alias!r}]: OPTIONS['database'] {self.database!r} is not in "
                "DATABASES", id="venturi.E001"))
        elif connections[self.database].vendor != "postgresql":
            errors.append(checks.Error(
                f"TASKS[{self.alias!r}]: DATABASES[{self.database!r}] is "
                f"{connections[self.database].vendor}; venturi needs PostgreSQL",
                id="venturi.E002"))
        else:
            from django.db.backends.postgresql.psycopg_any import is_psycopg3

            if not is_psycopg3:
                errors.append(checks.Error(
                    f"TASKS[{self.alias!r}]: Django runs DATABASES[{self.database!r}] on "
                    "psycopg2; venturi writes on Django's connection through psycopg 3",
                    hint="pip install 'venturi[django]' (Django prefers psycopg 3 when it "
                         "is installed)", id="venturi.E003"))
        return errors

    # --- enqueue --------------------------------------------------------------------------

    def _budget(self, task: Task) -> int:
        own = getattr(task, "max_failures", None)
        return self.config.max_failures if own is None else int(own)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        job_id = uuid7()
        result = TaskResult(
            task=task, id=str(job_id), status=TaskResultStatus.READY, enqueued_at=None,
            started_at=None, last_attempted_at=None, finished_at=None, args=list(args),
            kwargs=dict(kwargs), backend=self.alias, errors=[], worker_ids=[])
        at = task.run_after
        if at is not None and timezone.is_naive(at):  # USE_TZ = False: local time
            at = timezone.make_aware(at, timezone.get_default_timezone())
        text = _codec.dumps(payload(task.module_path, result.args, result.kwargs,
                                    task.priority, at))
        _codec.check_size(text, self.queue.queue.max_payload_bytes)
        kind = kind_for(task.queue_name)

        def insert(trace_context: str | None) -> list[Enqueued]:
            job = NewJob(id=job_id, kind=kind, payload=text, priority=int(tier(task.priority)),
                         max_failures=self._budget(task), at=at, subject=task.module_path,
                         trace_context=trace_context)
            # An error inside atomic() leaves Django's transaction unusable, as a failed
            # query of Django's own would: mark it so Django refuses to go on with it.
            with transaction.mark_for_rollback_on_error(using=self.database):
                return run_blocking(self.queue.store.enqueue([job]))

        # Traced as Queue.enqueue is: a send span whose context the job stores, so its
        # runs link to the request that enqueued it (docs/operations/tracing.md).
        tracer = tracing.tracer()
        if tracer is None:
            insert(None)
        else:
            with tracing.send(tracer, {kind}) as send:
                send.sent(insert(send.context))
        object.__setattr__(result, "enqueued_at", timezone.now())
        task_enqueued.send(type(self), task_result=result)
        return result

    # --- results ---------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        try:
            job_id = UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        job = self.queue.job(job_id)
        if job is None or queue_of(job.kind) is None:
            raise TaskResultDoesNotExist(result_id)
        return to_result(job, self.queue.journal(job_id), self.alias)

    def migrate(self) -> list[str]:
        """Create or update venturi's tables on the backend's database (Django's
        connection); returns the migrations applied."""
        return self.queue.migrate()
