"""The worker's configuration: one frozen, self-validating object."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from ..errors import ConfigError

RETENTION_STATUSES = ("completed", "dead")


def default_name() -> str:
    """``{hostname}:{pid}``: unique per process on a host (in a container, pid is often 1,
    and the hostname is the container's, which keeps it unique there too)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerConfig:
    """How a worker runs. Durations are ``timedelta``; every field is validated.

    ``prefetch`` jobs beyond the free slots may be claimed ahead; they are
    leased, renewed and released like running ones.
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
    prefetch: int = 0
    max_backoff: timedelta = timedelta(seconds=5)
    http: str | None = None  # "HOST:PORT" serves /healthz, /readyz, /metrics
    sample_interval: timedelta = timedelta(seconds=15)

    def __post_init__(self) -> None:
        if not isinstance(self.concurrency, int) or not 1 <= self.concurrency <= 10_000:
            raise ConfigError(f"concurrency must be an int in 1..10000, got {self.concurrency!r}")
        if not isinstance(self.prefetch, int) or not 0 <= self.prefetch <= 10_000:
            raise ConfigError(f"prefetch must be an int in 0..10000, got {self.prefetch!r}")
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
            from .http import parse_address

            parse_address(self.http)
        if self.kinds is not None and not self.kinds:
            raise ConfigError("kinds, when given, must name at least one kind")
