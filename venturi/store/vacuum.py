"""What the queue's own vacuum decides with (venturi/maintenance.py has the mechanism;
docs/operations/maintenance.md the figures): the policy, a table's health as the
statistics report it, and what one look did. Plain records, for the store contract
(``Store.maintenance``) and the worker's service alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class VacuumPolicy:
    """When the queue vacuums its own tables.

    ``interval``: how often a worker looks (the caller's loop sleeps it).
    ``dead_tuples``, ``dead_fraction``: vacuum once ``n_dead_tup`` exceeds
    ``dead_tuples + dead_fraction * n_live_tup`` (autovacuum's own rule, with
    thresholds for a queue: at 3,000 jobs/s a table gains ~9,000 dead versions a second).
    ``quiet_for``: where autovacuum is on for the table, first give it this long
    since the last vacuum (``last_vacuum``/``last_autovacuum``).
    ``min_gap``: never vacuum a table again sooner than this after its last vacuum,
    whoever ran it (the statistics are shared: this bounds a queue's VACUUMs however
    many workers look).
    ``analyze``: also ANALYZE when that many rows changed since the last analyze
    (autovacuum off means auto-analyze off too); 0 never.
    """

    interval: timedelta = timedelta(seconds=10)
    dead_tuples: int = 20_000
    dead_fraction: float = 0.1
    quiet_for: timedelta = timedelta(seconds=30)
    analyze: int = 100_000
    min_gap: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if self.interval <= timedelta(0) or min(self.quiet_for, self.min_gap) < timedelta(0):
            raise ConfigError("maintenance interval must be positive, quiet_for and min_gap"
                              " not negative")
        if self.dead_tuples < 0 or not 0 <= self.dead_fraction <= 1 or self.analyze < 0:
            raise ConfigError("maintenance thresholds must not be negative (fraction at most 1)")

    def over(self, health: TableHealth) -> bool:
        """Whether the table holds more dead row versions than the policy allows."""
        return health.dead > self.dead_tuples + self.dead_fraction * health.live

    def due(self, health: TableHealth) -> str | None:
        """Why ``health``'s table should be vacuumed now, or None."""
        if not self.over(health):
            return None
        since = health.since_vacuum
        if since is not None and since < self.min_gap.total_seconds():
            return None  # just vacuumed, by a worker of the queue or by autovacuum
        quiet = self.quiet_for.total_seconds()
        if health.autovacuum and health.since_vacuum is not None and health.since_vacuum < quiet:
            return None  # autovacuum is keeping up
        if health.autovacuum:
            return "autovacuum-behind"
        return "autovacuum-off"


@dataclass(frozen=True, slots=True)
class TableHealth:
    name: str
    dead: int
    live: int
    modified: int
    since_vacuum: float | None  # seconds; None: never vacuumed
    since_analyze: float | None
    autovacuum: bool
    may_vacuum: bool


@dataclass(frozen=True, slots=True)
class VacuumRun:
    """One table looked at: vacuumed (``seconds``), or ``skipped`` with the reason."""

    table: str
    reason: str
    dead_before: int
    dead_after: int | None = None
    seconds: float = 0.0
    analyzed: bool = False
    skipped: str | None = None
    horizon: str | None = None  # who held the xmin horizon, when nothing could be removed

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass
class MaintenanceState:
    """What one worker remembers between looks: the horizon that made a vacuum futile,
    per table, so it is not repeated until the horizon moves."""

    blocked: dict[str, str] = field(default_factory=dict)
