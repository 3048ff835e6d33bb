"""The worker's configuration: one frozen, self-validating object, and the tasks a
worker serves."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from ..config import parse_address
from ..errors import ConfigError, UnknownKind
from ..store.vacuum import VacuumPolicy
from ..task import Task, registered

RETENTION_STATUSES = ("completed", "dead")
DURATION_FIELDS = frozenset({
    "grace", "poll_interval", "heartbeat_interval", "periodic_reseed_interval",
    "retention_interval", "max_backoff", "sample_interval"})


def default_name() -> str:
    """``{hostname}:{pid}``: unique per process on a host (in a container, pid is often 1,
    and the hostname is the container's, which keeps it unique there too)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerConfig:
    """How a worker runs. Durations are ``timedelta``; every field is validated.

    ``prefetch``: how many jobs beyond the free slots may be claimed ahead.
    ``"auto"`` (the default) adapts it to the observed job rate and claim round
    trip, bounded so that a buffered job waits at most about 40 ms of the slots'
    work, or one claim round trip when that is longer, up to 100 ms (``prefetch.py``,
    docs/concepts/leases.md); a number fixes it, 0 claims only
    for free slots. Prefetched jobs are leased, renewed and released like running ones.

    ``gc_threshold``: while the worker runs, the garbage collector's young-generation
    threshold is at least this (CPython's default, 700, costs a busy worker ≈ 10 % of
    its CPU; docs/operations/sizing.md "Garbage collection"); process-wide, put back
    when the last worker stops; ``None`` leaves the collector alone.

    ``maintenance``: when the worker vacuums the queue's tables itself, where
    autovacuum is off or behind (docs/operations/maintenance.md); a ``VacuumPolicy``,
    ``True`` for the default one, ``False`` or ``None`` for never (read it as
    ``vacuum_policy``).
    """

    concurrency: int = 10
    kinds: tuple[str, ...] | None = None
    name: str | None = None
    grace: timedelta = timedelta(seconds=30)
    poll_interval: timedelta = timedelta(seconds=5)
    heartbeat_interval: timedelta = timedelta(seconds=5)
    periodic_reseed_interval: timedelta = timedelta(seconds=60)
    retention: Mapping[str, timedelta] = field(default_factory=dict)
    retention_interval: timedelta = timedelta(seconds=60)
    listen_dsn: str | None = None
    handle_signals: bool = False
    prefetch: int | Literal["auto"] = "auto"
    max_backoff: timedelta = timedelta(seconds=5)
    http: str | None = None  # "HOST:PORT" serves /healthz, /readyz, /metrics
    sample_interval: timedelta = timedelta(seconds=15)
    dashboard: bool = False  # with http: the dashboard too (venturi.web)
    dashboard_read_only: bool = False  # the dashboard's views only, whatever its auth
    maintenance: VacuumPolicy | bool | None = field(default_factory=VacuumPolicy)
    gc_threshold: int | None = 10_000  # the GC's young threshold while running (gcpolicy.py)


    def __post_init__(self) -> None:
        wanted = self.maintenance
        if isinstance(wanted, bool):  # maintenance=True / False: the default policy, or none
            object.__setattr__(self, "maintenance", VacuumPolicy() if wanted else None)
        elif wanted is not None and not isinstance(wanted, VacuumPolicy):
            raise ConfigError(f"maintenance must be a VacuumPolicy, True or False, got {wanted!r}")
        if self.gc_threshold is not None and (
                not isinstance(self.gc_threshold, int) or isinstance(self.gc_threshold, bool)
                or not 1 <= self.gc_threshold <= 10_000_000):
            raise ConfigError(f"gc_threshold must be None or an int in 1..10000000, "
                              f"got {self.gc_threshold!r}")
        if not isinstance(self.concurrency, int) or not 1 <= self.concurrency <= 10_000:
            raise ConfigError(f"concurrency must be an int in 1..10000, got {self.concurrency!r}")
        if self.prefetch != "auto" and (
                not isinstance(self.prefetch, int) or isinstance(self.prefetch, bool)
                or not 0 <= self.prefetch <= 10_000):
            raise ConfigError(
                f"prefetch must be 'auto' or an int in 0..10000, got {self.prefetch!r}")
        if self.name is not None and (not self.name or "/" in self.name
                                      or not self.name.isprintable() or len(self.name) > 200):
            raise ConfigError(
                f"worker name {self.name!r} must be printable, non-empty, without '/'")
        if self.grace < timedelta(0):
            raise ConfigError("grace must not be negative")
        for what in ("poll_interval", "heartbeat_interval", "retention_interval",
                     "periodic_reseed_interval", "max_backoff", "sample_interval"):
            if getattr(self, what) <= timedelta(0):
                raise ConfigError(f"{what} must be positive")
        for status, age in self.retention.items():
            if status not in RETENTION_STATUSES:
                raise ConfigError(f"retention status {status!r} is not one of completed, dead")
            if age <= timedelta(0):
                raise ConfigError(f"retention for {status} must be positive")
        if self.http is not None:
            parse_address(self.http)
        if (self.dashboard or self.dashboard_read_only) and self.http is None:
            raise ConfigError("the dashboard is served on the worker's http address: "
                              "give http (--http HOST:PORT) too")
        if self.kinds is not None and not self.kinds:
            raise ConfigError("kinds, when given, must name at least one kind")

    @property
    def vacuum_policy(self) -> VacuumPolicy | None:
        """``maintenance`` as the policy the worker follows (None: no vacuum)."""
        return self.maintenance if isinstance(self.maintenance, VacuumPolicy) else None

    @classmethod
    def from_options(cls, config: WorkerConfig | None, options: dict[str, Any]) -> WorkerConfig:
        """``config`` itself, or one made of ``Worker(...)``'s keyword options, where
        durations may be given in seconds and ``kinds`` as any sequence."""
        if config is not None:
            if options:
                raise ConfigError("pass config= or keyword options, not both")
            return config
        options = dict(options)
        if options.get("kinds") is not None:
            options["kinds"] = tuple(options["kinds"])
        for key, value in options.items():
            if key in DURATION_FIELDS and isinstance(value, int | float):
                options[key] = timedelta(seconds=value)
        return cls(**options)


def select_tasks(tasks: Sequence[type[Task]] | None,
                 kinds: Sequence[str] | None) -> dict[str, type[Task]]:
    """The tasks a worker serves, by kind: ``tasks`` (every registered task when None),
    narrowed to ``kinds`` when given."""
    chosen = list(tasks) if tasks is not None else list(registered().values())
    by_kind: dict[str, type[Task]] = {}
    for cls in chosen:
        if not (isinstance(cls, type) and issubclass(cls, Task) and hasattr(cls, "__task__")):
            raise ConfigError(f"{cls!r} is not a venturi Task class")
        by_kind[cls.__task__.kind] = cls
    if kinds is not None:
        for kind in kinds:
            if kind not in by_kind:
                raise UnknownKind(kind, list(by_kind))
        by_kind = {k: by_kind[k] for k in kinds}
    if not by_kind:
        raise ConfigError("a worker needs at least one task to run")
    return by_kind
