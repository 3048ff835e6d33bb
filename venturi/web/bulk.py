"""Acting on every job a filter matches: what can be done, for how many, and how.

Only filters whose count is known exactly are offered, so the confirmation
can say how many jobs the action touches:

- retry: every dead job (of one kind, or of each kind) is one ``Queue.retry``
  statement per kind, served by the dead-jobs index.
- cancel by subject: ``Queue.cancel(subject=...)``, one statement; the count
  is ``Queue.count(subject=...)``. It deletes the whole subtree, so it is only
  offered when the filter names nothing else.
- cancel by status (and kind): the matching ids are read in keyset pages and
  cancelled page by page, at most :data:`WALK_MAX` per confirmation, and only
  among jobs created before the confirmation was shown (``upto``): work that
  arrives meanwhile is not swept up.

Time-bounded filters have no count query yet (docs/operations/dashboard.md):
select their jobs one by one instead.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from venturi.queue import Queue
from venturi.store.records import Snapshot, Status

from .filters import JobFilter, known_count

WALK_MAX = 10_000
WALK_PAGE = 500


@dataclass(frozen=True, slots=True)
class Plan:
    action: str  # retry | cancel
    count: int  # jobs the filter matches now
    how: str  # retry-kinds | cancel-subject | cancel-walk
    kinds: tuple[str, ...] = ()

    @property
    def touches(self) -> int:
        """How many the confirmation promises at most."""
        return min(self.count, WALK_MAX) if self.how == "cancel-walk" else self.count


@dataclass(frozen=True, slots=True)
class Refusal:
    action: str
    reason: str


def plan(action: str, f: JobFilter, snap: Snapshot, total: int | None) -> Plan | Refusal:
    if f.timed:
        return Refusal(action, "time bounds have no count query yet: select the jobs instead")
    if action == "retry":
        if f.status is not Status.DEAD or f.subject is not None:
            return Refusal(action, "only dead jobs are retried: filter by status dead "
                                   "(and a kind), without a subject")
        kinds = (f.kind,) if f.kind is not None else tuple(sorted(snap.dead_by_kind))
        count = sum(snap.dead_by_kind.get(k, 0) for k in kinds)
        return Plan(action, count, "retry-kinds", kinds)
    if action != "cancel":
        return Refusal(action, f"unknown action {action!r}")
    if f.subject is not None:
        if f.kind is not None or f.status is not None:
            return Refusal(action, "cancelling a subject deletes its whole subtree: clear "
                                   "kind and status, or select the jobs")
        return Plan(action, total or 0, "cancel-subject")
    if f.status is None:
        return Refusal(action, "choose a status (or a subject) to cancel every match")
    known = known_count(f, snap)
    if known is None:
        return Refusal(action, f"the stats do not count {f.status.value} jobs of one kind: "
                               "select the jobs instead")
    return Plan(action, known, "cancel-walk")


async def run(queue: Queue, p: Plan, f: JobFilter, upto: uuid.UUID) -> int:
    """Carry the plan out; how many jobs it retried or cancelled."""
    if p.how == "retry-kinds":
        done = 0
        for kind in p.kinds:
            done += await queue.retry(kind=kind)
        return done
    if p.how == "cancel-subject":
        assert f.subject is not None
        return await queue.cancel(subject=f.subject)
    done = 0
    seen = 0
    cursor = upto
    status = f.status.value if f.status else None
    while seen < p.touches:
        page = await queue.history(kind=f.kind, status=status, before=cursor,
                                   limit=min(WALK_PAGE, p.touches - seen))
        if not page.jobs:
            break
        seen += len(page.jobs)
        done += await queue.cancel(ids=[j.id for j in page.jobs])
        if page.next_cursor is None:
            break
        cursor = page.jobs[-1].id
    return done
