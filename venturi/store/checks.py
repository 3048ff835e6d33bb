"""Refusing, before anything is written, a job the schema would refuse.

Both stores call these first, so a bad job fails alike in each: ``InvalidJob``
naming the offending index in a batch, nothing half-written.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from .._codec import json_has_nul
from ..errors import InvalidJob
from .records import NewJob, NewJobBatch, PlainJob


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
        problem = _new_job_problem(job) or (_after_problem(job) if job.after else None)
        if problem is not None:
            raise InvalidJob(problem, index=index if len(jobs) > 1 else None)
    if len(jobs) > 1 and any(job.after for job in jobs):
        cycle = find_cycle({job.id: job.after for job in jobs})
        if cycle is not None:
            path = " -> ".join(str(i) for i in cycle)
            raise InvalidJob(f"the jobs wait for each other in a cycle ({path}): "
                             "none would ever run")


def _after_problem(job: NewJob) -> str | None:
    """What a job that waits for others (docs/concepts/workflows.md) cannot also be."""
    if job.dedup_key is not None:
        return "a job with after= cannot have a dedup key (it would merge into another)"
    if job.periodic:
        return "a periodic task cannot wait for other jobs (after=)"
    if job.at is not None or job.delay:
        return "after= cannot be combined with delay= or at=: the job runs when they finish"
    if job.id in job.after:
        return "a job cannot wait for itself"
    if len(set(job.after)) != len(job.after):
        return "after= names a job twice"
    return None


def find_cycle(after: Mapping[Hashable, Sequence[Hashable]]) -> list[Hashable] | None:
    """A cycle among ``after`` (node -> the nodes it waits for; others are outside the
    graph), as the nodes along it with the first repeated at the end, or None."""
    state: dict[Hashable, int] = {}  # 1: on the current path, 2: done
    for start in after:
        if start in state:
            continue
        path: list[Hashable] = [start]
        todo = [iter(after[start])]
        state[start] = 1
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                todo.pop()
            elif nxt in after:
                if state.get(nxt) == 1:
                    return [*path[path.index(nxt):], nxt]
                if nxt not in state:
                    state[nxt] = 1
                    path.append(nxt)
                    todo.append(iter(after[nxt]))
    return None


def check_plain_job(job: PlainJob) -> None:
    """``check_new_jobs([job.job()])`` for ``Store.enqueue_plain``: the same rules, the
    same errors, without building the record."""
    problem = _columns_problem(job.priority, job.max_failures, job.payload, job.kind)
    if problem is not None:
        raise InvalidJob(problem)


def _columns_problem(priority: Any, max_failures: Any, payload: str | None, kind: str,
                     carry: str | None = None) -> str | None:
    """What is wrong with the columns every job has (a plain job has no other), and
    its carry."""
    if isinstance(priority, bool) or priority not in (0, 1, 2):
        return f"priority {priority!r} is out of range: use 0 (high), 1 (normal) or 2 (low)"
    if isinstance(max_failures, bool) or not (
            isinstance(max_failures, int) and max_failures >= 1):
        return f"max_failures {max_failures!r} must be an int >= 1"
    if payload is not None and json_has_nul(payload):
        return "payload contains a NUL character, which jsonb cannot store"
    if carry is not None and json_has_nul(carry):
        return "carry contains a NUL character, which jsonb cannot store"
    return _text_column_problem("kind", kind)


def _text_column_problem(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    if "\x00" in value:
        return f"{name} contains a NUL character"
    if value.isascii():  # no lone surrogate to find: skip the encoding
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{name} is not valid UTF-8 (lone surrogate)"
    return None


def _new_job_problem(job: NewJob) -> str | None:
    return (_columns_problem(job.priority, job.max_failures, job.payload, job.kind, job.carry)
            or _text_column_problem("subject", job.subject)
            or _text_column_problem("dedup_key", job.dedup_key))
