"""What MemoryStore answers about its rows: a job, its journal, history, counts,
stats and detail, as the PostgreSQL statements of ``inspect.sql`` answer them."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from typing import Any
from uuid import UUID

from ..errors import ConfigError
from .base import (
    Clock,
    CountFilter,
    Detail,
    FailedJob,
    FinishedMinute,
    HistoryFilter,
    JobRecord,
    JournalRecord,
    KeysetFilter,
    Outcome,
    Snapshot,
    Status,
)


def refuse_conn(conn: Any) -> None:
    """MemoryStore holds no database transaction a caller's connection could share."""
    if conn is not None:
        raise ConfigError("MemoryStore cannot join a caller's connection (conn=)")


def in_subtree(subject: str | None, root: str) -> bool:
    """Whether ``subject`` is ``root`` itself or below ``root/``, literally."""
    return subject is not None and (subject == root or subject.startswith(root + "/"))


def _in_ids(id: UUID, since: UUID | None, before: UUID | None) -> bool:
    return (since is None or id >= since) and (before is None or id < before)


class Rows(dict[UUID, JobRecord]):
    """MemoryStore's jobs by id. Like the jobs table's tally triggers
    (sql/0006_tallies.sql), it counts every time a stored job enters a finished
    status; deleting jobs does not lower those counts."""

    def __init__(self) -> None:
        super().__init__()
        self.entered: Counter[tuple[str, Status]] = Counter()

    def __setitem__(self, id: UUID, job: JobRecord) -> None:
        old = self.get(id)
        if old is not None and job.status.terminal and old.status is not job.status:
            self.entered[(job.kind, job.status)] += 1
        super().__setitem__(id, job)

    def restore(self, saved: dict[UUID, JobRecord]) -> None:
        """Back to ``saved`` (a copy taken before a batch that failed half-way)."""
        self.clear()
        self.update(saved)


class MemoryViews:
    """MemoryStore's reads (a mixin: the store holds the rows)."""

    clock: Clock
    _jobs: Rows
    _journal: dict[UUID, list[JournalRecord]]
    _awaited: set[UUID]

    def _now(self) -> dt.datetime:
        return self.clock.now() or dt.datetime.now(dt.UTC)

    async def job(self, id: UUID, *, conn: Any = None) -> JobRecord | None:
        refuse_conn(conn)
        return self._jobs.get(id)

    async def watch_job(self, id: UUID) -> JobRecord | None:
        job = self._jobs.get(id)
        if job is not None:
            self._awaited.add(id)
        return job

    async def journal(self, id: UUID, *, conn: Any = None) -> list[JournalRecord]:
        refuse_conn(conn)
        return list(self._journal.get(id, []))

    async def query_jobs(self, filter: HistoryFilter, *, conn: Any = None) -> list[JobRecord]:
        refuse_conn(conn)
        f = filter
        found = [
            j for j in self._jobs.values()
            if _in_ids(j.id, f.since_id, f.before)
            and (f.kind is None or j.kind == f.kind)
            and (f.status is None or j.status is f.status)
            and (f.subject is None or in_subtree(j.subject, f.subject))
            and (f.finished_since is None or (j.finished_at is not None
                                              and j.finished_at >= f.finished_since))
            and (f.finished_until is None or (j.finished_at is not None
                                              and j.finished_at < f.finished_until))
        ]
        found.sort(key=lambda j: j.id, reverse=True)
        return found[: f.limit]

    def _of_status(self, status: Status, f: KeysetFilter) -> list[JobRecord]:
        return [j for j in self._jobs.values()
                if j.status is status and (f.kind is None or j.kind == f.kind)
                and _in_ids(j.id, f.since_id, f.before_id)]

    async def dead_jobs(self, filter: KeysetFilter, *, conn: Any = None) -> list[JobRecord]:
        refuse_conn(conn)
        # (finished_at DESC, id ASC), the dead jobs' index order.
        def key(j: JobRecord) -> tuple[float, UUID]:
            return -(j.finished_at or self._now()).timestamp(), j.id

        found = sorted(self._of_status(Status.DEAD, filter), key=key)
        if filter.after is not None:
            at, last = filter.after
            found = [j for j in found if key(j) > (-at.timestamp(), last)]
        return found[: filter.limit]

    async def claimed_jobs(self, filter: KeysetFilter, *, conn: Any = None) -> list[JobRecord]:
        refuse_conn(conn)
        def key(j: JobRecord) -> tuple[dt.datetime, UUID]:
            return j.claim_expires_at or self._now(), j.id

        found = sorted(self._of_status(Status.CLAIMED, filter), key=key)
        if filter.after is not None:
            found = [j for j in found if key(j) > filter.after]
        return found[: filter.limit]

    async def periodic_jobs(self, *, conn: Any = None) -> list[JobRecord]:
        refuse_conn(conn)
        return sorted((j for j in self._jobs.values()
                       if j.periodic and j.status in (Status.PENDING, Status.CLAIMED)),
                      key=lambda j: j.kind)

    async def finished_per_minute(self, since: dt.datetime, until: dt.datetime, limit: int, *,
                                  conn: Any = None) -> list[FinishedMinute]:
        refuse_conn(conn)
        recent = sorted((j for j in self._jobs.values()
                         if j.finished_at is not None and since <= j.finished_at < until),
                        key=lambda j: j.finished_at or since, reverse=True)[:limit]
        buckets: Counter[tuple[dt.datetime, str, Status]] = Counter()
        for j in recent:
            assert j.finished_at is not None
            minute = j.finished_at.astimezone(dt.UTC).replace(second=0, microsecond=0)
            buckets[(minute, j.kind, j.status)] += 1
        keys = sorted({(m, k) for m, k, _ in buckets})
        return [FinishedMinute(m, k, buckets[(m, k, Status.COMPLETED)],
                               buckets[(m, k, Status.DEAD)]) for m, k in keys]

    async def count(self, filter: CountFilter, *, conn: Any = None) -> int:
        refuse_conn(conn)
        statuses = set(filter.statuses) if filter.statuses else set(Status)
        n = sum(
            1 for j in self._jobs.values()
            if j.status in statuses
            and (filter.kind is None or j.kind == filter.kind)
            and (filter.subject is None or in_subtree(j.subject, filter.subject))
            and _in_ids(j.id, filter.since_id, filter.before_id)
        )
        return n if filter.at_most is None else min(n, filter.at_most)

    async def stats(self, *, conn: Any = None) -> Snapshot:
        refuse_conn(conn)
        now = self._now()
        snap = Snapshot(counts_by_status={s.value: 0 for s in Status})
        oldest: dict[str, dt.datetime] = {}
        for j in self._jobs.values():
            snap.counts_by_status[j.status.value] += 1
            if j.status is Status.PENDING:
                if j.visible_at <= now:
                    snap.pending_by_kind[j.kind] = snap.pending_by_kind.get(j.kind, 0) + 1
                    oldest[j.kind] = min(oldest.get(j.kind, j.visible_at), j.visible_at)
                else:
                    snap.scheduled_by_kind[j.kind] = snap.scheduled_by_kind.get(j.kind, 0) + 1
            elif j.status is Status.CLAIMED:
                snap.claimed_by_kind[j.kind] = snap.claimed_by_kind.get(j.kind, 0) + 1
            elif j.status is Status.DEAD:
                snap.dead_by_kind[j.kind] = snap.dead_by_kind.get(j.kind, 0) + 1
            else:
                snap.completed_by_kind[j.kind] = snap.completed_by_kind.get(j.kind, 0) + 1
        snap.oldest_pending_age.update({k: now - v for k, v in oldest.items()})
        for (kind, status), n in self._jobs.entered.items():
            totals = snap.completed_total_by_kind if status is Status.COMPLETED \
                else snap.dead_total_by_kind
            totals[kind] = n
        return dataclasses.replace(snap, claimed=snap.counts_by_status["claimed"])

    async def detail(self, limit: int, *, conn: Any = None) -> Detail:
        refuse_conn(conn)
        now = self._now()
        runnable = [j.visible_at for j in self._jobs.values()
                    if j.status is Status.PENDING and j.visible_at <= now]
        dead = sorted(
            (j for j in self._jobs.values() if j.status is Status.DEAD),
            key=lambda j: (-(j.finished_at or now).timestamp(), j.id),
        )[:limit]
        failed = []
        for j in dead:
            reason = next((e.note for e in reversed(self._journal.get(j.id, []))
                           if e.outcome is Outcome.DEAD), None)
            failed.append(FailedJob(j.id, j.kind, j.subject, reason, j.finished_at or now))
        return Detail(now - min(runnable) if runnable else None, failed)
