"""MemoryStore's administering statements — cancel, retry (redrive) and cleanup — with
the semantics of ``postgres/administering.py`` (docs/operations/cli.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from ..notices import cancel_messages, encode
from . import lifecycle
from .base import CleanupCriteria, JobRecord, Status, WorkflowRecord
from .memory_dependencies import WAITING, Edges
from .memory_recovery import MemoryRecovery
from .memory_views import in_subtree, refuse_conn

_ACTIVE = (Status.PENDING, Status.CLAIMED)


class MemoryAdmin(MemoryRecovery):
    """The administering part of MemoryStore (a mixin: the store holds the rows)."""

    _edges: Edges
    _workflows: dict[UUID, WorkflowRecord]
    _step_of: dict[UUID, UUID]

    def _periodic_taken(self, kind: str, ignore: UUID | None = None) -> bool:
        raise NotImplementedError

    async def cancel(
        self, *, ids: Sequence[UUID] | None = None, subject: str | None = None, conn: Any = None,
        unfinished: bool = False,
    ) -> int:
        refuse_conn(conn)
        if ids is not None:
            wanted = set(ids)
            victims = [j for j in self._jobs.values() if j.id in wanted
                       and not (unfinished and j.status.terminal)]
        else:
            victims = [j for j in self._jobs.values() if in_subtree(j.subject, subject or "")]
        claimed = [str(j.id) for j in victims if j.status is Status.CLAIMED]
        for j in victims:
            del self._jobs[j.id]
            self._journal.pop(j.id, None)
        for message in cancel_messages(claimed):
            self._notify("control", encode(message))
        self._announce_finished([j.id for j in victims if not j.status.terminal])
        follower = self._follower()
        for j in victims:
            if not j.status.terminal:
                follower.finished(j.id, True, self._now())
        for j in victims:
            self._edges.forget(j.id)
        self._forget_workflows(j.id for j in victims)
        self._followed(follower)
        return len(victims)

    async def retry(self, *, ids: Sequence[UUID] | None = None, kind: str | None = None) -> int:
        now = self._now()
        wanted = None if ids is None else set(ids)
        before = dict(self._jobs)  # what the statement's snapshot would see
        chosen: list[JobRecord] = []
        for j in sorted(before.values(), key=lambda j: j.id):
            if j.status is not Status.DEAD:
                continue
            if wanted is not None and j.id not in wanted:
                continue
            if wanted is None and kind is not None and j.kind != kind:
                continue
            if j.periodic and (self._periodic_taken(j.kind)
                               or any(c.kind == j.kind and c.periodic for c in chosen)):
                continue
            chosen.append(j)
        kinds: set[str] = set()
        for j in chosen:
            # It waits again for those of its dependencies still pending or claimed.
            waiting = sum(1 for p in self._edges.parents.get(j.id, [])
                          if (o := before.get(p)) is not None and o.status in _ACTIVE)
            j = lifecycle.REDRIVE.apply(j, now)
            if waiting:
                j = dataclasses.replace(j, visible_at=WAITING, waiting=waiting)
            self._jobs[j.id] = j
            self._append(j, j.run_count, lifecycle.REDRIVE.outcome, lifecycle.REDRIVE_NOTE)
            if not waiting:
                kinds.add(j.kind)
        follower = self._follower()
        for j in chosen:
            follower.redriven(j.id, now)
        for k in sorted(kinds):
            self._notify("jobs", k)
        self._followed(follower)
        return len(chosen)

    async def cleanup(self, criteria: CleanupCriteria) -> int:
        return self._delete_finished(criteria, None)

    def _delete_finished(self, criteria: CleanupCriteria, limit: int | None) -> int:
        statuses = {criteria.status} if criteria.status else {Status.COMPLETED, Status.DEAD}
        victims = sorted(
            (j for j in self._jobs.values()
             if j.status in statuses and j.finished_at is not None
             and j.finished_at < criteria.finished_before
             and (criteria.kind is None or j.kind == criteria.kind)),
            key=lambda j: (j.finished_at, j.id))[:limit]
        for id in [j.id for j in victims]:
            del self._jobs[id]
            self._journal.pop(id, None)
            self._edges.forget(id)
        self._forget_workflows(j.id for j in victims)
        return len(victims)

    def _forget_workflows(self, gone: Iterable[UUID]) -> None:
        """A workflow's record goes with its last step (sql/0008_workflows_fanin.sql)."""
        for wf in {w for id in gone if (w := self._step_of.pop(id, None)) is not None}:
            if not any(step in self._jobs for _, step in self._workflows[wf].steps):
                del self._workflows[wf]


    async def cleanup_exclusive(self, criteria: CleanupCriteria) -> int | None:
        # One batch, oldest first, as the retention statement deletes them.
        return self._delete_finished(criteria, criteria.batch_size)
