"""Typed tasks: the payload schema, per-kind options, outcomes and the registry.

A task is a dataclass whose fields are the job's payload. Subclassing
``Task`` with ``kind=...`` registers it process-wide; a second class claiming
the same kind is refused, so a worker can never route a job to the wrong code.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, Self, dataclass_transform

from . import _codec
from .context import Context as Context
from .context import ResultReader as ResultReader
from .errors import ConfigError, TaskDefinitionError, UnknownKind
from .store.flow import NO_LIMITS, Limits, Rate, check_concurrency

if TYPE_CHECKING:
    from croniter import croniter as _croniter  # noqa: F401

MIN_LEASE = timedelta(seconds=0.5)
MAX_LEASE = timedelta(hours=24)
DEFAULT_LEASE = timedelta(seconds=10)
DEFAULT_TIMEOUT = timedelta(minutes=30)
DEFAULT_MAX_FAILURES = 25
RESERVED_FIELDS = frozenset({"run", "subject", "dedup_key", "merge", "backoff", "kind",
                             "limit_key"})


class Priority(IntEnum):
    """Claim tiers: lower runs first (the schema stores 0..2).

    Workers keep lower tiers moving under a flood of high-priority work: of
    every ten claims, one is reserved for ``LOW`` and one for ``NORMAL`` when
    such work is runnable.
    """

    HIGH = 0
    NORMAL = 1
    LOW = 2

    @classmethod
    def parse(cls, value: Priority | int | str) -> Priority:
        """Accept a member, its number or its name (``"high"``)."""
        if isinstance(value, str) and not value.isdigit():
            try:
                return cls[value.upper()]
            except KeyError:
                raise ConfigError(
                    f"priority {value!r} is not one of high, normal, low"
                ) from None
        try:
            return cls(int(value))
        except ValueError:
            raise ConfigError(
                f"priority {value!r} is out of range: use 0 (high), 1 (normal) or 2 (low)"
            ) from None


def check_lease(lease: timedelta, what: str = "lease") -> timedelta:
    if not MIN_LEASE <= lease <= MAX_LEASE:
        raise ConfigError(f"{what} {lease} is outside 0.5s..24h")
    return lease


# --- outcomes -----------------------------------------------------------------

_UNSET: Any = object()


class Pause:
    """Return from ``run`` to put the job back without spending a failure.

    ``carry`` (any JSON value) is persisted for the next run; when omitted,
    the context's current ``ctx.carry`` is kept (docs/concepts/pause-and-carry.md).
    """

    __slots__ = ("carry", "resume_in")

    def __init__(self, resume_in: timedelta, carry: Any = _UNSET) -> None:
        if resume_in < timedelta(0):
            raise ConfigError(f"Pause.resume_in {resume_in} is negative")
        self.resume_in = resume_in
        self.carry = carry

    @property
    def has_carry(self) -> bool:
        """Whether ``carry`` was given (None is a value: it clears the carry)."""
        return self.carry is not _UNSET


class GiveUp(Exception):
    """Raise from ``run`` to kill the job now; ``reason`` is its journal note.

    The reason is a classification (``"unsupported-format"``), not a message:
    it is stored in the database and shown to operators.
    """

    def __init__(self, reason: str) -> None:
        reason = " ".join(str(reason).split())[:200] or "gave-up"
        self.reason = reason
        super().__init__(reason)


class Merge:
    """Base of the decisions ``Task.merge`` returns for a dedup hit."""

    __slots__ = ()


class Keep(Merge):
    """Leave the pending job untouched; the new enqueue is absorbed."""

    __slots__ = ()


class Replace(Merge):
    """Replace the pending job's payload and priority with the new task's; carry reset."""

    __slots__ = ()


class With(Merge):
    """Store exactly this payload (a task of the same kind) and carry."""

    __slots__ = ("carry", "payload")

    def __init__(self, payload: Task, carry: Any = None) -> None:
        self.payload = payload
        self.carry = carry


# --- options and registry -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskOptions:
    kind: str
    priority: Priority
    lease: timedelta
    timeout: timedelta
    max_failures: int
    every: timedelta | None
    cron: str | None
    limits: Limits = NO_LIMITS  # concurrency= and rate= (docs/concepts/flow-control.md)

    @property
    def periodic(self) -> bool:
        return self.every is not None or self.cron is not None


_REGISTRY: dict[str, type[Task]] = {}


def lookup(kind: str) -> type[Task]:
    """The task class registered for ``kind``; ``UnknownKind`` otherwise."""
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnknownKind(kind, list(_REGISTRY)) from None


def registered() -> Mapping[str, type[Task]]:
    """A read-only view of every registered kind."""
    return dict(_REGISTRY)


def _validate_kind(kind: object, where: str) -> str:
    if not isinstance(kind, str) or not kind or len(kind) > 200 or not kind.isprintable() \
            or kind != kind.strip():
        raise TaskDefinitionError(
            f"{where}: kind must be a non-empty printable string without surrounding spaces"
        )
    return kind


@dataclass_transform(kw_only_default=False)
class Task:
    """Base class of every task. Subclass with ``kind=`` and annotated fields:

    ```python
    class Embed(venturi.Task, kind="embed", lease=timedelta(seconds=30)):
        uri: str

        async def run(self, ctx: venturi.Context) -> None: ...
    ```

    The annotated fields become a dataclass: they are the job's payload, stored
    as JSON (JSON types, ``datetime``, ``UUID``, ``Enum`` and nested dataclasses;
    anything else is refused when the class is created).

    Class keywords, all optional except ``kind``:

    - ``kind``: the stable name stored with every job; one class per kind per process.
    - ``priority``: default tier, ``Priority.NORMAL``; ``enqueue(priority=)`` overrides it.
    - ``lease``: how long a claim lasts without renewal, default 10 s (0.5 s to 24 h).
    - ``timeout``: how long one run may take before it is cancelled and counted
      as a failure (note ``timeout``), default 30 min.
    - ``max_failures``: failed runs before the job goes dead, default 25.
    - ``every`` / ``cron``: make the task periodic (no required fields, no ``dedup_key``).
    - ``concurrency``: at most this many jobs of the kind claimed at once, across every
      worker; ``rate``: at most ``"N/s"``, ``"N/m"`` or ``"N/h"`` claims in any window of
      that length. Both apply per ``limit_key()`` when the task defines it
      (docs/concepts/flow-control.md); an operator's ``venturi limits`` overrides them.
    """

    __task__: ClassVar[TaskOptions]
    kind: ClassVar[str]

    def __init_subclass__(
        cls,
        *,
        kind: str | None = None,
        priority: Priority | int | str = Priority.NORMAL,
        lease: timedelta = DEFAULT_LEASE,
        timeout: timedelta = DEFAULT_TIMEOUT,
        max_failures: int = DEFAULT_MAX_FAILURES,
        every: timedelta | None = None,
        cron: str | None = None,
        concurrency: int | None = None,
        rate: str | Rate | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        where = cls.__qualname__
        if kind is None:
            raise TaskDefinitionError(f"{where}: a Task subclass needs kind=\"...\"")
        _validate_kind(kind, where)
        try:
            prio = Priority.parse(priority)
            check_lease(lease, "lease")
        except ConfigError as exc:
            raise TaskDefinitionError(f"{where}: {exc}") from None
        if timeout <= timedelta(0):
            raise TaskDefinitionError(f"{where}: timeout must be positive")
        if not isinstance(max_failures, int) or max_failures < 1:
            raise TaskDefinitionError(f"{where}: max_failures must be an int >= 1")
        try:
            limits = Limits(None if concurrency is None else check_concurrency(concurrency),
                            None if rate is None else Rate.parse(rate))
        except ConfigError as exc:
            raise TaskDefinitionError(f"{where}: {exc}") from None
        if every is not None and cron is not None:
            raise TaskDefinitionError(f"{where}: give every= or cron=, not both")
        if every is not None and every <= timedelta(0):
            raise TaskDefinitionError(f"{where}: every= must be positive")
        if cron is not None:
            from croniter import croniter

            if not croniter.is_valid(cron):
                raise TaskDefinitionError(f"{where}: cron={cron!r} is not a valid expression")
        import inspect

        run = cls.__dict__.get("run") or getattr(cls, "run", None)
        if run is None or run is Task.run or not inspect.iscoroutinefunction(run):
            raise TaskDefinitionError(f"{where}: define `async def run(self, ctx)`")

        own = set(inspect.get_annotations(cls))
        clash = own & RESERVED_FIELDS
        if clash:
            raise TaskDefinitionError(f"{where}: field name(s) {sorted(clash)} are reserved")
        dataclass(cls)  # mutates cls in place: fields become the payload
        _codec.dataclass_converter(cls)  # refuses types that do not round-trip through JSON

        periodic = every is not None or cron is not None
        if periodic:
            required = [
                f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ]
            if required:
                raise TaskDefinitionError(
                    f"{where}: a periodic task cannot have required fields {required}"
                )
            if "dedup_key" in cls.__dict__:
                raise TaskDefinitionError(f"{where}: a periodic task cannot define dedup_key")

        cls.__task__ = TaskOptions(kind, prio, lease, timeout, max_failures, every, cron, limits)
        cls.kind = kind
        existing = _REGISTRY.get(kind)
        if existing is not None and (existing.__module__, existing.__qualname__) != (
            cls.__module__, cls.__qualname__
        ):
            raise TaskDefinitionError(
                f"{where}: kind {kind!r} is already registered by "
                f"{existing.__module__}.{existing.__qualname__}"
            )
        _REGISTRY[kind] = cls

    # --- hooks a task may override ------------------------------------------------

    async def run(self, ctx: Context) -> str | Pause | None:
        """Do the work. Return None or a short note to complete; return ``Pause``
        to come back later; raise ``GiveUp`` to stop for good; any other
        exception is retried after ``backoff``."""
        raise NotImplementedError

    def subject(self) -> str | None:
        """The resource this job targets (a URI), for cancel/count by subtree."""
        return None

    def dedup_key(self) -> str | None:
        """Jobs of one kind with the same key coalesce while pending."""
        return None

    def limit_key(self) -> str | None:
        """The partition of the kind's ``concurrency`` and ``rate`` this job counts in
        (a tenant, a user, an API key); None: the kind's own."""
        return None

    def merge(self, pending: Self, carry: Any) -> Merge:
        """Decide how this new task folds into the pending one with the same key."""
        return Keep()

    def backoff(self, failures: int) -> timedelta:
        """Delay before retry number ``failures``: exponential, capped at 1 h, ±20 % jitter."""
        base = min(2.0 ** min(failures - 1, 20), 3600.0)
        return timedelta(seconds=base * random.uniform(0.8, 1.2))

    # --- codec ------------------------------------------------------------------

    def to_json(self) -> str:
        """The payload as JSON text (raises ``InvalidJob`` if it cannot be stored)."""
        return _codec.dumps(self)

    @classmethod
    def from_payload(cls, payload: Any) -> Self:
        """Decode a stored payload; ``PayloadDecodeError`` if it no longer fits."""
        result: Self = _codec.decode_into(cls, payload)
        return result
