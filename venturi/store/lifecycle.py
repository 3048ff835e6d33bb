"""The lifecycle transitions, defined once.

Each way a job's row changes outside a claim — a settled run (complete, fail,
kill, pause, release), a recovery (lease expiry, boot recovery), a redrive and
a merge — is a :class:`Transition`: the status it ends in, the journal entry it
writes, what it does to the failure count and to ``visible_at``. The rules are
those of docs/concepts/lifecycle.md and docs/concepts/failures.md; the
decisions are made here, above the stores, and the stores only write them:

- ``MemoryStore`` applies :meth:`Transition.apply` to its rows;
- the PostgreSQL statements, which must decide inside one statement (the budget
  depends on the row's counts), mirror this module (``settle.sql``,
  ``recover.sql``, ``admin.sql``), and take the notes from it as parameters;
- the conformance suite (``venturi.testing``) drives both stores through every
  transition and compares the rows and journal entries with what this module
  says, so the two cannot drift apart unnoticed.

Every transition leaves the row unclaimed (``claimed_by`` and
``claim_expires_at`` NULL) and sets ``finished_at`` exactly when its status is
terminal. Its journal entry carries the job's current run count.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from enum import StrEnum

from .records import JobRecord
from .settlements import Action
from .statuses import Outcome, Status

_ZERO = dt.timedelta(0)


class Visibility(StrEnum):
    """What a transition does to ``visible_at``."""

    KEEP = "keep"  # unchanged: the job is terminal, nobody claims it
    NOW = "now"  # runnable at once
    AFTER_DELAY = "after-delay"  # now + the settlement's delay (retry backoff, pause)
    EARLIER = "earlier"  # the earlier of the current and the requested time: never postponed


class Recovery(StrEnum):
    """Why a claim is taken back; the value is the journal note (a classification)."""

    LEASE_EXPIRED = "lease-expired"  # the lease ran out: crash, hang, lost network
    WORKER_RESTARTED = "worker-restarted"  # an earlier boot of the same worker name


REDRIVE_NOTE = "operator"
"""The note of a ``redriven`` entry: an operator put the dead job back."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One change of a job's row and the one journal entry that records it."""

    status: Status
    outcome: Outcome
    visibility: Visibility
    counts_failure: bool = False  # failure_count + 1, in the statement that settles the run
    resets_budget: bool = False  # failure_count back to 0 (redrive)

    def failure_count(self, before: int) -> int:
        if self.resets_budget:
            return 0
        return before + 1 if self.counts_failure else before

    def visible_at(self, before: dt.datetime, now: dt.datetime, *, delay: dt.timedelta = _ZERO,
                   requested: dt.datetime | None = None) -> dt.datetime:
        if self.visibility is Visibility.NOW:
            return now
        if self.visibility is Visibility.AFTER_DELAY:
            return now + delay
        if self.visibility is Visibility.EARLIER and requested is not None:
            return min(before, requested)
        return before

    @property
    def wakes(self) -> bool:
        """Whether idle workers are told: the job is pending again, so someone may claim it
        (at once, or when it becomes visible)."""
        return self.status is Status.PENDING

    def apply(self, job: JobRecord, now: dt.datetime, *, delay: dt.timedelta = _ZERO,
              requested: dt.datetime | None = None) -> JobRecord:
        """``job`` as this transition leaves it at ``now`` (carry and successor aside: a
        settlement's own fields, not the lifecycle's)."""
        return dataclasses.replace(
            job, status=self.status, failure_count=self.failure_count(job.failure_count),
            visible_at=self.visible_at(job.visible_at, now, delay=delay, requested=requested),
            finished_at=now if self.status.terminal else None,
            claimed_by=None, claim_expires_at=None,
        )


def budget_spent(failure_count: int, max_failures: int) -> bool:
    """Whether one more failure ends the job: the count it reaches is ``max_failures``
    (docs/concepts/failures.md)."""
    return failure_count + 1 >= max_failures


_COMPLETED = Transition(Status.COMPLETED, Outcome.COMPLETED, Visibility.KEEP)
_RETRIED = Transition(Status.PENDING, Outcome.RETRIED, Visibility.AFTER_DELAY, counts_failure=True)
# A failure that spends the budget still sets visible_at as its retry would have.
_FAILED_DEAD = Transition(Status.DEAD, Outcome.DEAD, Visibility.AFTER_DELAY, counts_failure=True)
_KILLED = Transition(Status.DEAD, Outcome.DEAD, Visibility.KEEP, counts_failure=True)
_PAUSED = Transition(Status.PENDING, Outcome.PAUSED, Visibility.AFTER_DELAY)
_RELEASED = Transition(Status.PENDING, Outcome.RELEASED, Visibility.AFTER_DELAY)
_STALE_RECOVERED = Transition(Status.PENDING, Outcome.STALE_RECOVERED, Visibility.NOW,
                              counts_failure=True)
_RECOVERED_DEAD = Transition(Status.DEAD, Outcome.DEAD, Visibility.NOW, counts_failure=True)

REDRIVE = Transition(Status.PENDING, Outcome.REDRIVEN, Visibility.NOW, resets_budget=True)
"""``retry``: a dead job back to pending with a fresh failure budget."""

MERGE = Transition(Status.PENDING, Outcome.MERGED, Visibility.EARLIER)
"""A dedup hit folded into a pending job (docs/concepts/dedup.md)."""

# (action, budget spent) -> transition. Only FAIL depends on the budget: KILL is dead
# whatever is left, and pause and release never count.
_SETTLE = {
    **{(action, spent): t for action, t in (
        (Action.COMPLETE, _COMPLETED), (Action.KILL, _KILLED), (Action.PAUSE, _PAUSED),
        (Action.RELEASE, _RELEASED)) for spent in (False, True)},
    (Action.FAIL, False): _RETRIED,
    (Action.FAIL, True): _FAILED_DEAD,
}


def settle(action: Action, failure_count: int, max_failures: int) -> Transition:
    """What a finished run's ``action`` does to a claimed job with these counts."""
    return _SETTLE[action, budget_spent(failure_count, max_failures)]


def recover(failure_count: int, max_failures: int) -> Transition:
    """What taking back a claim (either :class:`Recovery`) does: a failure, visible at
    once, or dead when it spends the budget."""
    return _RECOVERED_DEAD if budget_spent(failure_count, max_failures) else _STALE_RECOVERED
