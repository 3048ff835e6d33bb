"""A job's status and a journal entry's outcome: the enums whose values are the
schema's strings, carried by the records of ``records`` and ``settlements``."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A job's lifecycle state; the values are the schema's strings."""

    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    DEAD = "dead"

    @property
    def terminal(self) -> bool:
        return self in (Status.COMPLETED, Status.DEAD)


class Outcome(StrEnum):
    """What one journal entry records; the values are the schema's strings."""

    COMPLETED = "completed"
    PAUSED = "paused"
    RETRIED = "retried"
    DEAD = "dead"
    STALE_RECOVERED = "stale-recovered"
    RELEASED = "released"
    MERGED = "merged"
    REDRIVEN = "redriven"

    @property
    def is_execution(self) -> bool:
        """Executions carry run numbers 1..n; merges and redrives annotate."""
        return self not in (Outcome.MERGED, Outcome.REDRIVEN)

    @property
    def is_failure(self) -> bool:
        return self in (Outcome.RETRIED, Outcome.DEAD, Outcome.STALE_RECOVERED)
