"""What a venturi worker runs for a Django queue: the task function the job names.

Each Django queue the backend lists is one venturi Task class (kind
``django:<queue_name>``, the payload of ``jobs.payload``). Its ``run`` imports the
Django task by path and calls its function as Django expects of a long-running
process: database connections are checked with ``close_old_connections()`` before
and after each call (``CONN_MAX_AGE``, broken connections), a sync function runs
in a thread of the worker's pool, sized to its concurrency (a blocking ORM call
never stalls the event loop, nor the lease renewals on it), and an async function
runs on the loop.

A thread cannot be cancelled: when a sync function overruns its ``timeout`` or its
lease is lost, the run is settled as venturi says (docs/concepts/leases.md) while
the thread goes on to the function's end, holding one of the pool's threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import types
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.tasks.base import Task as DjangoTask
from django.tasks.base import TaskContext
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from ...errors import ConfigError
from ...queue import Queue
from ...task import Context, GiveUp, Task
from .backend import VenturiBackend
from .jobs import kind_for
from .results import STARTED, WORKER, to_result


@dataclasses.dataclass(frozen=True, slots=True)
class RunnerState:
    """The worker's ``ctx.state`` for Django jobs: its threads, its name as Django's
    ``worker_ids`` show it, the queue (for a ``takes_context`` task's TaskResult) and
    the backend alias results are reported under."""

    threads: ThreadPoolExecutor
    worker_id: str
    queue: Queue
    backend: str


def lifespan(queue: Queue, backend: VenturiBackend, *, concurrency: int, worker_id: str
             ) -> Callable[[], contextlib.AbstractAsyncContextManager[RunnerState]]:
    """The worker's lifespan: a thread pool for sync task functions, shut down with it."""

    @contextlib.asynccontextmanager
    async def run() -> AsyncIterator[RunnerState]:
        threads = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="django-task")
        try:
            yield RunnerState(threads, worker_id, queue, backend.alias)
        finally:
            # Threads still running a function the worker gave up on are not waited for.
            threads.shutdown(wait=False, cancel_futures=True)

    return run


def _call_sync(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    close_old_connections()
    try:
        return normalize_json(func(*args, **kwargs))
    finally:
        close_old_connections()


async def _call_async(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    # The ORM's async methods run on asgiref's thread-sensitive thread: its
    # connection is the one to check.
    await sync_to_async(close_old_connections)()
    try:
        return normalize_json(await func(*args, **kwargs))
    finally:
        await sync_to_async(close_old_connections)()


def _django_task(path: str) -> DjangoTask:
    try:
        found = import_string(path)
    except ImportError:
        raise GiveUp("task-not-found") from None
    if not isinstance(found, DjangoTask):
        raise GiveUp("not-a-task")
    return found


async def run_call(job: Any, ctx: Context) -> None:
    """Run the Django task function ``job`` (a payload of ``jobs.payload``) names."""
    state = ctx.state
    if not isinstance(state, RunnerState):
        raise ConfigError("Django jobs run in a worker started with --django "
                          "(or venturi.contrib.django.runner.lifespan)")
    task = _django_task(job.func)
    ctx.attach(**{WORKER: state.worker_id, STARTED: dt.datetime.now(dt.UTC).isoformat()})
    args: list[Any] = list(job.args)
    if task.takes_context:
        record = await state.queue.job(ctx.job_id)
        if record is None:  # cancelled between the claim and this read
            return
        journal = await state.queue.journal(ctx.job_id)
        result = to_result(record, journal, state.backend)
        args.insert(0, TaskContext(task_result=result))
    if iscoroutinefunction(task.func):
        value = await _call_async(task.func, args, job.kwargs)
    else:
        loop = asyncio.get_running_loop()
        value = await loop.run_in_executor(
            state.threads, functools.partial(_call_sync, task.func, args, job.kwargs))
    # venturi's own job result (docs/concepts/results.md), held to the payload's limit: a
    # value too large fails the run here (InvalidJob), where its author sees it.
    ctx.set_result(value)


def job_class(queue_name: str, backend: VenturiBackend) -> type[Task]:
    """The venturi Task class serving Django queue ``queue_name`` (one per process)."""

    async def run(self: Any, ctx: Context) -> None:
        await run_call(self, ctx)

    def subject(self: Any) -> str:
        return str(self.func)

    def body(ns: dict[str, Any]) -> None:
        ns["__annotations__"] = {"func": str, "args": list[Any], "kwargs": dict[str, Any],
                                 "priority": int, "run_after": dt.datetime | None}
        ns.update(priority=0, run_after=None, run=run, subject=subject, __module__=__name__,
                  __doc__=f"Django task functions of queue {queue_name!r}.")

    cls: type[Task] = types.new_class(
        f"DjangoQueue[{queue_name}]", (Task,),
        {"kind": kind_for(queue_name), "lease": backend.config.lease,
         "timeout": backend.config.timeout, "max_failures": backend.config.max_failures},
        body)
    return cls


def job_classes(backend: VenturiBackend) -> list[type[Task]]:
    """One Task class per queue of ``backend``, in name order."""
    return [job_class(name, backend) for name in sorted(backend.queues)]
