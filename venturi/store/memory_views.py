"""What MemoryStore answers about its rows: a job, its journal, history, counts,
stats and detail, as the PostgreSQL statements of ``inspect.sql`` answer them."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any
from uuid import UUID

from ..errors import ConfigError
from .base import (
    Clock,
    CountFilter,
    Detail,
    FailedJob,
    HistoryFilter,
    JobRecord,
    JournalRecord,
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


class MemoryViews:
    """MemoryStore's reads (a mixin: the store holds the rows)."""

    clock: Clock
    _jobs: dict[UUID, JobRecord]
    _journal: dict[UUID, list[JournalRecord]]

    def _now(self) -> dt.datetime:
        return self.clock.now() or dt.datetime.now(dt.UTC)

    async def job(self, id: UUID, *, conn: Any = None) -> JobRecord | None:
        refuse_conn(conn)
        return self._jobs.get(id)

    async def journal(self, id: UUID, *, conn: Any = None) -> list[JournalRecord]:
        refuse_conn(conn)
        return list(self._journal.get(id, []))

    async def query_jobs(self, filter: HistoryFilter, *, conn: Any = None) -> list[JobRecord]:
        refuse_conn(conn)
        f = filter
        found = [
            j for j in self._jobs.values()
            if (f.before is None or j.id < f.before)
            and (f.kind is None or j.kind == f.kind)
            and (f.status is None or j.status is f.status)
            and (f.finished_since is None or (j.finished_at is not None
                                              and j.finished_at >= f.finished_since))
            and (f.finished_until is None or (j.finished_at is not None
                                              and j.finished_at < f.finished_until))
        ]
        found.sort(key=lambda j: j.id, reverse=True)
        return found[: f.limit]

    async def count(self, filter: CountFilter, *, conn: Any = None) -> int:
        refuse_conn(conn)
        statuses = set(filter.statuses) if filter.statuses else set(Status)
        return sum(
            1 for j in self._jobs.values()
            if j.status in statuses
            and (filter.kind is None or j.kind == filter.kind)
            and (filter.subject is None or in_subtree(j.subject, filter.subject))
        )

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
        snap.oldest_pending_age.update({k: now - v for k, v in oldest.items()})
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
