"""MemoryStore's dependencies: what sql/0004_results.sql's trigger does, in Python.

A job enqueued with ``after=`` waits (pending, visible at :data:`WAITING`, ``waiting``
counting its unfinished dependencies) until they finish; docs/concepts/workflows.md.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from uuid import UUID

from .records import JobRecord
from .statuses import Outcome, Status

WAITING = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
"""The ``visible_at`` of a job waiting for its dependencies: beyond any real schedule,
so no claim reaches it (the claim index stays as it is)."""

DEPENDENCY_FAILED = "dependency-failed"
DEPENDENCY_REDRIVEN = "dependency-redriven"


class Edges:
    """The dependency edges of one store: parent -> [(child, run_on_failure)]."""

    def __init__(self) -> None:
        self.children: dict[UUID, list[tuple[UUID, bool]]] = {}
        self.parents: dict[UUID, list[UUID]] = {}

    def add(self, child: UUID, parent: UUID, run_on_failure: bool) -> None:
        self.children.setdefault(parent, []).append((child, run_on_failure))
        self.parents.setdefault(child, []).append(parent)

    def forget(self, child: UUID) -> None:
        for parent in self.parents.pop(child, []):
            kept = [c for c in self.children.get(parent, []) if c[0] != child]
            if kept:
                self.children[parent] = kept
            else:
                self.children.pop(parent, None)


Journal = Callable[[JobRecord, int, Outcome, str | None], None]


class Follower:
    """Moves a finished job's dependents on, as the trigger does (docs/concepts/workflows.md).

    ``jobs`` is the store's rows, ``journal`` appends an entry, ``last_note`` reads a
    job's last journal note; ``woken`` (kinds made runnable) and ``doomed`` (ids that
    went dead) collect what the store announces afterwards."""

    def __init__(self, jobs: dict[UUID, JobRecord], edges: Edges, journal: Journal,
                 last_note: Callable[[UUID], str | None]) -> None:
        self.jobs = jobs
        self.edges = edges
        self.journal = journal
        self.last_note = last_note
        self.woken: set[str] = set()
        self.doomed: list[UUID] = []

    def finished(self, parent: UUID, failed: bool, at: dt.datetime) -> None:
        """``parent`` completed (``failed`` False), or went dead or was cancelled."""
        for child, run_on_failure in list(self.edges.children.get(parent, [])):
            job = self.jobs.get(child)
            if job is None or job.status is not Status.PENDING or job.waiting <= 0:
                continue
            if not failed or run_on_failure:
                left = job.waiting - 1
                self.jobs[child] = dataclasses.replace(
                    job, waiting=left, visible_at=at if left == 0 else job.visible_at)
                if left == 0:
                    self.woken.add(job.kind)
                continue
            dead = self.jobs[child] = dataclasses.replace(
                job, status=Status.DEAD, finished_at=at, waiting=0)
            self.journal(dead, dead.run_count, Outcome.DEAD, DEPENDENCY_FAILED)
            self.doomed.append(child)
            self.finished(child, True, at)

    def redriven(self, parent: UUID, at: dt.datetime) -> None:
        """``parent`` went back to pending: the dependents that died of it wait again,
        unless another of their dependencies is dead or gone, and so do its
        ``after_failure="run"`` dependents that have not run yet."""
        for child, run_on_failure in list(self.edges.children.get(parent, [])):
            job = self.jobs.get(child)
            if run_on_failure and job is not None and job.status is Status.PENDING:
                # It counted the death as done, and has not run: it waits again.
                self.jobs[child] = dataclasses.replace(job, waiting=job.waiting + 1,
                                                       visible_at=WAITING)
                continue
            if (run_on_failure or job is None or job.status is not Status.DEAD
                    or self.last_note(child) != DEPENDENCY_FAILED):
                continue
            others = [self.jobs.get(p) for p in self.edges.parents.get(child, []) if p != parent]
            if any(o is None or o.status is Status.DEAD for o in others):
                continue
            waiting = sum(1 for p in self.edges.parents.get(child, [])
                          if (j := self.jobs.get(p)) is None or j.status is not Status.COMPLETED)
            back = self.jobs[child] = dataclasses.replace(
                job, status=Status.PENDING, finished_at=None, failure_count=0,
                visible_at=WAITING, waiting=waiting)
            self.journal(back, back.run_count, Outcome.REDRIVEN, DEPENDENCY_REDRIVEN)
            self.redriven(child, at)
