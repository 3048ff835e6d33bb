"""MemoryStore's dependencies and workflows: jobs enqueued ``after=`` others, the
follow-up when a job they wait for finishes, workflows and results, with the semantics
of ``enqueue.sql``'s insert_waiting and sql/0004_results.sql (docs/concepts/workflows.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from ..errors import ConfigError
from .base import Enqueued, JobRecord, MergeFn, NewJob, Outcome, Status, WorkflowRecord
from .memory_admin import MemoryAdmin
from .memory_dependencies import WAITING, Follower
from .memory_views import refuse_conn

_ACTIVE = (Status.PENDING, Status.CLAIMED)


class MemoryWorkflows(MemoryAdmin):
    """The dependencies-and-workflows part of MemoryStore (a mixin: the store holds the
    rows)."""

    def _put(self, job: JobRecord, **changes: Any) -> JobRecord:
        raise NotImplementedError

    def _insert(self, job: NewJob, now: dt.datetime) -> JobRecord:
        raise NotImplementedError

    async def enqueue(
        self, jobs: Sequence[NewJob], *, merge: MergeFn | None = None, conn: Any = None
    ) -> list[Enqueued]:
        raise NotImplementedError

    def _follower(self) -> Follower:
        def last_note(id: UUID) -> str | None:
            entries = self._journal.get(id)
            return entries[-1].note if entries else None
        return Follower(self._jobs, self._edges, self._append, last_note)

    def _followed(self, follower: Follower) -> None:
        """Announce what a Follower did: dependents made runnable, dependents failed."""
        for kind in sorted(follower.woken):
            self._notify("jobs", kind)
        self._announce_finished(follower.doomed)

    def _insert_waiting(self, jobs: Sequence[NewJob], now: dt.datetime) -> None:
        """insert_waiting (enqueue.sql) in Python: see docs/concepts/workflows.md."""
        batch = {j.id for j in jobs}
        by_id = {j.id: j for j in jobs}
        outside = {a: self._jobs.get(a) for j in jobs for a in j.after if a not in batch}
        doomed = {j.id for j in jobs if not j.run_on_failure and any(
            a not in batch and ((o := outside[a]) is None or o.status is Status.DEAD)
            for a in j.after)}
        grew = True
        while grew:
            grew = False
            for j in jobs:
                if j.id not in doomed and not j.run_on_failure and any(
                        a in doomed for a in j.after):
                    doomed.add(j.id)
                    grew = True
        for j in jobs:
            if j.id in self._jobs:
                raise ConfigError(f"duplicate job id {j.id}")
        for j in jobs:
            record = self._insert(j, now)
            if j.id in doomed:
                record = self._put(record, status=Status.DEAD, finished_at=now, visible_at=now)
                self._append(record, 0, Outcome.DEAD, "dependency-failed")
            else:
                waiting = sum(1 for a in j.after if (a in batch and a not in doomed) or (
                    a not in batch and (o := outside[a]) is not None
                    and o.status in _ACTIVE))
                if waiting:
                    self._put(record, waiting=waiting, visible_at=WAITING)
            for a in j.after:
                self._edges.add(j.id, a, by_id[j.id].run_on_failure)

    async def enqueue_workflow(self, workflow: WorkflowRecord, jobs: Sequence[NewJob], *,
                               conn: Any = None) -> None:
        refuse_conn(conn)
        if workflow.id in self._workflows:
            raise ConfigError(f"duplicate workflow id {workflow.id}")
        await self.enqueue(jobs)
        self._workflows[workflow.id] = dataclasses.replace(
            workflow, created_at=self._now(), jobs={}, after={})
        self._step_of.update((job.id, workflow.id) for job in jobs)

    async def workflow_of(self, job: UUID) -> UUID | None:
        return next((wf.id for wf in self._workflows.values()
                     if any(step == job for _, step in wf.steps)), None)

    async def workflow(self, id: UUID, *, conn: Any = None) -> WorkflowRecord | None:
        refuse_conn(conn)
        found = self._workflows.get(id)
        if found is None:
            return None
        ids = [step for _, step in found.steps]
        return dataclasses.replace(
            found, jobs={i: j for i in ids if (j := self._jobs.get(i)) is not None},
            after={i: list(self._edges.parents[i]) for i in ids if i in self._edges.parents})

    async def results(self, ids: Sequence[UUID]) -> dict[UUID, Any]:
        return {id: job.result for id in ids
                if (job := self._jobs.get(id)) is not None and job.status is Status.COMPLETED}

    async def dependencies(self, id: UUID) -> list[UUID]:
        return sorted(self._edges.parents.get(id, []))
