"""A venturi job as Django's ``TaskResult``: status, return value, errors, times, attempts.

| venturi row | Django status |
| --- | --- |
| ``pending`` (new, scheduled, or back for another run) | ``READY`` |
| ``claimed`` | ``RUNNING`` |
| ``completed`` | ``SUCCESSFUL`` |
| ``dead`` | ``FAILED`` |

Each run is one journal entry (docs/concepts/lifecycle.md). The worker's wrapper
(``runner``) attaches to its entry the worker that ran it, when it started, and,
for a run that returned, the return value; a failed run's entry holds its
classification (the exception's type, ``timeout``, ``lease-expired``), never a
message or a traceback (those are in the worker's log). So ``errors`` are
classifications: ``TaskError.exception_class_path`` names the exception's class
where the failure was one, and ``traceback`` says where the traceback went.

The return value is the job's venturi result (``ctx.set_result``, stored by the
settle that completes it: docs/concepts/results.md), so ``venturi job`` and
``Queue.result`` read it too.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
from typing import Any

from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.utils.module_loading import import_string

from ...store.base import JobRecord, JournalRecord, Outcome, Status
from .jobs import queue_of

#: The attachment keys the runner writes on each run's journal entry.
WORKER, STARTED = "worker", "started_at"

STATUSES = {
    Status.PENDING: TaskResultStatus.READY,
    Status.CLAIMED: TaskResultStatus.RUNNING,
    Status.COMPLETED: TaskResultStatus.SUCCESSFUL,
    Status.DEAD: TaskResultStatus.FAILED,
}
RUNS = frozenset({Outcome.COMPLETED, Outcome.PAUSED, Outcome.RETRIED, Outcome.DEAD,
                  Outcome.STALE_RECOVERED, Outcome.RELEASED})
FAILURES = frozenset({Outcome.RETRIED, Outcome.DEAD, Outcome.STALE_RECOVERED})
UNKNOWN_WORKER = "unknown"
#: Failures that are not an exception of the task function's: their class.
NOT_RAISED = {"timeout": "builtins.TimeoutError"}
LOST = "venturi.contrib.django.results.RunLost"


class RunLost(Exception):
    """A run that ended without an exception of the task function's own: its worker
    was lost (``lease-expired``, a boot recovery) or venturi refused the job
    (an undecodable payload). The journal note says which."""


def exception_path(note: str | None) -> str:
    """The dotted class path of a failure's classification (``ValueError`` is a
    builtin's: ``builtins.ValueError``)."""
    if not note:
        return LOST
    if note in NOT_RAISED:
        return NOT_RAISED[note]
    if "." in note:
        return note
    candidate = getattr(builtins, note, None)
    if isinstance(candidate, type) and issubclass(candidate, BaseException):
        return f"builtins.{note}"
    return LOST


def task_error(entry: JournalRecord) -> TaskError:
    return TaskError(
        exception_class_path=exception_path(entry.note),
        traceback=f"{entry.note or entry.outcome.value} (run {entry.run_no}; venturi keeps "
                  "tracebacks in the worker's log, not in the database)")


def _when(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


def rebuild_task(payload: dict[str, Any], queue_name: str) -> Task:
    """The Django Task the job was enqueued from, with the call's own options."""
    path = payload.get("func")
    try:
        found = import_string(path)
    except (ImportError, AttributeError, TypeError) as exc:
        raise ValueError(f"the job names task {path!r}, which does not import: {exc}") from None
    if not isinstance(found, Task):
        raise ValueError(f"the job names {path!r}, which is not a Django task")
    return dataclasses.replace(found, priority=payload.get("priority", found.priority),
                               queue_name=queue_name, run_after=_when(payload.get("run_after")))


def to_result(job: JobRecord, journal: list[JournalRecord], backend: str) -> TaskResult:
    """Django's view of ``job`` (a job of a Django queue) and its journal."""
    queue_name = queue_of(job.kind)
    assert queue_name is not None, "to_result takes jobs of Django queues only"
    payload = job.payload if isinstance(job.payload, dict) else {}
    runs = [e for e in journal if e.outcome in RUNS and e.run_no >= 1]
    marks = [e.attachment if isinstance(e.attachment, dict) else {} for e in runs]
    worker_ids = [str(m.get(WORKER) or UNKNOWN_WORKER) for m in marks]
    starts = [_when(m.get(STARTED)) for m in marks]
    if job.status is Status.CLAIMED and len(runs) < job.run_count:
        # The run in progress has no entry yet: its worker is the row's owner.
        worker_ids.append((job.claimed_by or UNKNOWN_WORKER).split("/")[0])
        starts.append(None)
    known = [s for s in starts if s is not None]
    result = TaskResult(
        task=rebuild_task(payload, queue_name),
        id=str(job.id),
        status=STATUSES[job.status],
        enqueued_at=job.created_at,
        started_at=known[0] if known else None,
        last_attempted_at=starts[-1] if starts else None,
        finished_at=job.finished_at,
        args=list(payload.get("args") or []),
        kwargs=dict(payload.get("kwargs") or {}),
        backend=backend,
        errors=[task_error(e) for e in runs if e.outcome in FAILURES],
        worker_ids=worker_ids,
    )
    if job.status is Status.COMPLETED:
        object.__setattr__(result, "_return_value", job.result)
    return result
