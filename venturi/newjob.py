"""From a task to the store's new-job row: the checks every enqueue makes, the payload,
the columns of a plain batch, and a dedup merge's decision. ``Queue`` holds one
``JobBuilder``; the rules it checks are the ones docs/concepts/dedup.md and
docs/concepts/workflows.md describe."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from . import _codec
from ._ids import uuid7, uuid7_many
from .errors import InvalidJob, InvalidJobId, PayloadDecodeError, UnknownKind
from .store.base import JobRecord, MergeUpdate, NewJob, NewJobBatch, PlainJob
from .task import Keep, Priority, Replace, Task, With, lookup

MAX_DELAY = dt.timedelta(days=3650)
NO_DELAY = dt.timedelta(0)
AFTER_FAILURE = ("fail", "run")


@dataclass(frozen=True, slots=True)
class Dependent:
    """An ``enqueue_many`` item that waits for other jobs: ``task`` runs once every job
    of ``after`` has completed. A dependency that dies or is cancelled fails it (note
    ``dependency-failed``) unless ``after_failure="run"`` (docs/concepts/workflows.md)."""

    task: Task | tuple[str, Mapping[str, Any]]
    after: Sequence[UUID | str]
    after_failure: str = "fail"


JobLike = Task | tuple[str, Mapping[str, Any]] | Dependent


class JobBuilder:
    """Turns what a caller enqueues into ``NewJob`` rows (or one ``NewJobBatch``),
    refusing a bad item with ``InvalidJob`` before anything is written."""

    def __init__(self, max_payload_bytes: int, now: Callable[[], dt.datetime]) -> None:
        self.max_payload_bytes = max_payload_bytes
        self.now = now
        # plain_job's answer per class: its (kind, priority, max_failures), or None
        # for a class whose jobs are not plain.
        self._plain: dict[type, tuple[str, int, int] | None] = {}

    def plain_job(self, task: Any) -> PlainJob | None:
        """``task`` as a ``PlainJob`` (``Store.enqueue_plain``) when its class makes
        nothing but plain jobs: no subject, dedup key or limit key, not periodic.
        Called with no option given (delay, at, priority, after) and no tracer: the
        row is then ``new_job(task)``'s, built with the fewest steps (a single enqueue
        runs it once per call). None: take ``new_job``. A payload that cannot be
        stored raises ``new_job``'s ``InvalidJob``, word for word."""
        cls = type(task)
        try:
            shape = self._plain[cls]
        except KeyError:
            shape = self._plain[cls] = _plain_shape(cls)
        if shape is None:
            return None
        payload = _codec.dumps(task)
        if len(payload) * 4 > self.max_payload_bytes:  # check_size's own test, inlined
            _codec.check_size(payload, self.max_payload_bytes)
        return PlainJob(uuid7(), shape[0], payload, shape[1], shape[2])

    def new_job(
        self,
        item: JobLike,
        *,
        index: int | None = None,
        id: UUID | None = None,
        delay: dt.timedelta | None = None,
        at: dt.datetime | None = None,
        priority: Priority | int | str | None = None,
        trace_context: str | None = None,
        after: Sequence[UUID | str] | None = None,
        after_failure: str = "fail",
    ) -> tuple[NewJob, Task]:
        # Runs once per job of an enqueue_many: the common case (a Task, no
        # delay, at or priority override) takes the fewest steps.
        if isinstance(item, Dependent):
            if after is not None:
                raise InvalidJob("give after= once: on the Dependent or the call")
            after, after_failure, item = item.after, item.after_failure, item.task
        try:
            parents = () if after is None and after_failure == "fail" else after_ids(
                after, after_failure)
            task = item if isinstance(item, Task) else self.as_task(item)
            options = type(task).__task__
            payload = _codec.dumps(task)
            if len(payload) * 4 > self.max_payload_bytes:  # check_size's own test, inlined
                _codec.check_size(payload, self.max_payload_bytes)
            if delay is not None or at is not None:
                if delay is not None and at is not None:
                    raise InvalidJob("give delay= or at=, not both")
                if delay is not None and not isinstance(delay, dt.timedelta):
                    raise InvalidJob(f"delay= must be a timedelta, not {type(delay).__name__}")
                if delay is not None and not (dt.timedelta(0) <= delay <= MAX_DELAY):
                    raise InvalidJob(f"delay {delay} is outside 0..{MAX_DELAY.days} days")
                if at is not None and (not isinstance(at, dt.datetime) or at.tzinfo is None):
                    raise InvalidJob("at= must be a timezone-aware datetime")
                if at is not None and at - self.now() > MAX_DELAY:
                    raise InvalidJob(
                        f"at= {at.isoformat()} is more than {MAX_DELAY.days} days away")
            if priority is None:
                prio = options.priority
            else:
                try:
                    prio = Priority.parse(priority)
                except ValueError as exc:
                    raise InvalidJob(str(exc)) from None
            subject = task.subject()
            dedup_key = task.dedup_key()
            limit_key = task.limit_key()
            if subject is not None or dedup_key is not None or limit_key is not None:
                for name, value in (("subject", subject), ("dedup_key", dedup_key),
                                    ("limit_key", limit_key)):
                    if value is not None and (not isinstance(value, str) or "\x00" in value):
                        raise InvalidJob(f"{name}() must return a string without NUL characters")
                    if value is not None and not encodable(value):
                        raise InvalidJob(f"{name}() returned a string with a lone surrogate")
        except (InvalidJob, InvalidJobId) as exc:
            reason = exc.reason if isinstance(exc, InvalidJob) else str(exc)
            if index is None:
                raise
            raise InvalidJob(reason, index=index) from None
        job = NewJob(
            id=id or uuid7(), kind=options.kind, payload=payload, priority=int(prio),
            max_failures=options.max_failures, delay=delay or NO_DELAY, at=at,
            dedup_key=dedup_key, subject=subject, periodic=options.periodic,
            trace_context=trace_context, limit_key=limit_key, after=parents,
            run_on_failure=after_failure == "run",
        )
        return job, task

    def plain_batch(self, tasks: Sequence[JobLike],
                     trace_context: str | None = None) -> NewJobBatch | None:
        """The batch's columns when every item is a Task whose class has no dedup
        key: ``_new_job``'s work without a record per job, with the class's
        options read once per class. None: take the general path (``(kind,
        payload)`` items, dedup keys), which also names the index of a bad item."""
        uniform = self._uniform_batch(tasks, trace_context)
        if uniform is not None:
            return uniform
        n = len(tasks)
        kinds: list[str] = []
        payloads: list[str] = []
        priorities: list[int] = []
        max_failures: list[int] = []
        subjects: list[str | None] | None = None
        periodic: list[bool] | None = None
        shapes: dict[type, tuple[str, int, int, bool, bool]] = {}
        dumps, limit = _codec.dumps, self.max_payload_bytes
        for index, item in enumerate(tasks):
            shape = shapes.get(type(item))
            if shape is None:
                if not isinstance(item, Task):
                    return None
                cls = type(item)
                if cls.dedup_key is not Task.dedup_key or cls.limit_key is not Task.limit_key:
                    return None
                options = cls.__task__
                shape = shapes[cls] = (options.kind, int(options.priority),
                                       options.max_failures, options.periodic,
                                       cls.subject is not Task.subject)
            kind, priority, failures, is_periodic, has_subject = shape
            try:
                payload = dumps(item)
                # check_size, inlined: only text that might be over is encoded.
                if len(payload) * 4 > limit:
                    _codec.check_size(payload, limit)
            except InvalidJob as exc:
                raise InvalidJob(exc.reason, index=index) from None
            if has_subject:
                subject = cast(Task, item).subject()
                if not (isinstance(subject, str) and "\x00" not in subject
                        and encodable(subject)) and subject is not None:
                    self.new_job(item, index=index)  # raises naming the index
                    return None
                if subjects is None:
                    subjects = [None] * index
                subjects.append(subject)
            elif subjects is not None:
                subjects.append(None)
            if is_periodic and periodic is None:
                periodic = [False] * index
            if periodic is not None:
                periodic.append(is_periodic)
            kinds.append(kind)
            payloads.append(payload)
            priorities.append(priority)
            max_failures.append(failures)
        return NewJobBatch(uuid7_many(n), kinds, payloads, priorities, max_failures,
                           subjects, periodic, trace_context)

    def _uniform_batch(self, tasks: Sequence[JobLike],
                       trace_context: str | None) -> NewJobBatch | None:
        """``plain_batch`` of the usual batch, column by column: tasks of one class
        with no subject, dedup key or limit key, not periodic. None for any other
        batch, and for one with an item to refuse: ``plain_batch``'s loop then names
        its index."""
        if not tasks:
            return None
        cls = type(tasks[0])
        if not (issubclass(cls, Task) and cls.subject is Task.subject
                and cls.dedup_key is Task.dedup_key and cls.limit_key is Task.limit_key):
            return None
        options = cls.__task__
        if options.periodic or set(map(type, tasks)) != {cls}:
            return None
        try:
            payloads = _codec.dumps_many(tasks)
        except InvalidJob:
            return None
        # check_size's own test: a character is at most 4 UTF-8 bytes.
        if max(map(len, payloads)) * 4 > self.max_payload_bytes:
            return None
        n = len(tasks)
        return NewJobBatch(uuid7_many(n), [options.kind] * n, payloads,
                           [int(options.priority)] * n, [options.max_failures] * n,
                           None, None, trace_context)

    @staticmethod
    def as_task(item: JobLike) -> Task:
        if isinstance(item, Task):
            return item
        if isinstance(item, tuple) and len(item) == 2:
            kind, payload = item
            try:
                return lookup(kind).from_payload(payload)
            except UnknownKind as exc:
                raise InvalidJob(str(exc)) from None
            except PayloadDecodeError as exc:
                raise InvalidJob(f"payload does not fit task {kind!r}: {exc}") from None
        raise InvalidJob(f"expected a Task instance, got {type(item).__name__}")

    def merge_fn(self, tasks: dict[UUID, Task]) -> Any:
        def merge(new: NewJob, pending: JobRecord) -> MergeUpdate | None:
            task = tasks[new.id]
            try:
                current = type(task).from_payload(pending.payload)
            except PayloadDecodeError:
                return None  # the pending job no longer decodes: enqueue ours beside it
            decision = task.merge(current, pending.carry)
            if isinstance(decision, Keep):
                return MergeUpdate()
            if isinstance(decision, Replace):
                return MergeUpdate(payload=new.payload, priority=new.priority,
                                   set_carry=True, carry=None)
            if isinstance(decision, With):
                if type(decision.payload) is not type(task):
                    raise InvalidJob("With(payload=...) must be a task of the same kind")
                payload = _codec.dumps(decision.payload)
                _codec.check_size(payload, self.max_payload_bytes)
                carry = None if decision.carry is None else _codec.dumps(decision.carry)
                return MergeUpdate(payload=payload, priority=new.priority,
                                   set_carry=True, carry=carry)
            raise InvalidJob(f"merge() returned {decision!r}, not Keep/Replace/With")
        return merge


def _plain_shape(cls: type) -> tuple[str, int, int] | None:
    """(kind, priority, max_failures) of a Task class whose every job is plain, else None."""
    if not (issubclass(cls, Task) and cls.subject is Task.subject
            and cls.dedup_key is Task.dedup_key and cls.limit_key is Task.limit_key):
        return None
    options = cls.__task__
    if options.periodic:
        return None
    return options.kind, int(options.priority), options.max_failures


def after_ids(after: Sequence[UUID | str] | None, after_failure: str) -> tuple[UUID, ...]:
    """``after=`` as ids, each once, in the order given."""
    if after_failure not in AFTER_FAILURE:
        raise InvalidJob(f"after_failure must be one of {', '.join(AFTER_FAILURE)}, "
                         f"not {after_failure!r}")
    if after is None:
        return ()
    if isinstance(after, str | UUID):
        raise InvalidJob("after= takes a list of job ids")
    return tuple(dict.fromkeys(parse_uuid(a, what="after= job id") for a in after))


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def parse_uuid(value: UUID | str, what: str = "job id") -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise InvalidJobId(f"{what} {value!r} is not a UUID") from None
