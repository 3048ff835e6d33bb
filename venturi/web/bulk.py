"""Acting on every job a filter matches: what can be done, for how many, and how.

Every filter has a count (``filters.match_count``: exact from the stats, or a
count that stops at ``COUNT_CAP``), so the confirmation says how many jobs the
action touches:

- retry every dead job (of one kind, or of each kind): one ``Queue.retry``
  statement per kind, served by the dead jobs' index.
- cancel a subject's subtree: ``Queue.cancel(subject=...)``, one statement. It
  deletes the whole subtree, so it is what a filter naming only a subject does.
- any other filter (a status, a subject with a kind or status, time bounds):
  its jobs are read page by page, exactly as the jobs page lists them, and retried
  or cancelled page by page, at most :data:`WALK_MAX` per confirmation and only
  among jobs created before the confirmation was shown (``upto``): work that
  arrives meanwhile is not swept up.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from venturi.queue import Queue
from venturi.store.records import Snapshot
from venturi.store.statuses import Status

from .filters import JobFilter, Total, list_jobs

WALK_MAX = 10_000
WALK_PAGE = 500


@dataclass(frozen=True, slots=True)
class Plan:
    action: str  # retry | cancel
    count: int  # jobs the filter matches now (at least this many unless exact)
    how: str  # retry-kinds | cancel-subject | walk
    kinds: tuple[str, ...] = ()
    exact: bool = True

    @property
    def touches(self) -> int:
        """How many the confirmation promises at most."""
        return min(self.count, WALK_MAX) if self.how == "walk" else self.count


@dataclass(frozen=True, slots=True)
class Refusal:
    action: str
    reason: str


def plan(action: str, f: JobFilter, snap: Snapshot, total: Total) -> Plan | Refusal:
    if action == "retry":
        if f.status is not Status.DEAD:
            return Refusal(action, "only dead jobs are retried: filter by status dead")
        if f.subject is None and not f.timed:
            kinds = (f.kind,) if f.kind is not None else tuple(sorted(snap.dead_by_kind))
            count = sum(snap.dead_by_kind.get(k, 0) for k in kinds)
            return Plan(action, count, "retry-kinds", kinds)
        return Plan(action, total.n, "walk", exact=total.exact)
    if action != "cancel":
        return Refusal(action, f"unknown action {action!r}")
    if f.subject is not None and f.kind is None and f.status is None and not f.timed:
        return Plan(action, total.n, "cancel-subject", exact=total.exact)
    if f.status is None and f.subject is None and not f.timed:
        return Refusal(action, "choose a status, a subject or a time range to cancel every "
                               "job it matches")
    return Plan(action, total.n, "walk", exact=total.exact)


async def run(queue: Queue, p: Plan, f: JobFilter, snap: Snapshot, upto: uuid.UUID) -> int:
    """Carry the plan out; how many jobs it retried or cancelled."""
    if p.how == "retry-kinds":
        done = 0
        for kind in p.kinds:
            done += await queue.retry(kind=kind)
        return done
    if p.how == "cancel-subject":
        assert f.subject is not None
        return await queue.cancel(subject=f.subject)
    done = seen = 0
    cursor: str | None = None
    while seen < p.touches:
        page = await list_jobs(queue, f, snap, cursor=cursor,
                               limit=min(WALK_PAGE, p.touches - seen), upto=upto)
        if not page.jobs:
            break
        seen += len(page.jobs)
        ids = [j.id for j in page.jobs]
        done += await (queue.retry(ids=ids) if p.action == "retry" else queue.cancel(ids=ids))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return done
