"""Inspecting: one job, its journal, history pages, counts, stats and detail."""

from __future__ import annotations

import datetime as dt
from typing import Any
from uuid import UUID

from ..base import CountFilter, Detail, FailedJob, HistoryFilter, JobRecord, JournalRecord, Snapshot
from . import rows
from .operations import Operations

ALL_STATUSES = list(rows.STATUS)


class Inspecting(Operations):
    async def job(self, id: UUID, *, conn: Any = None) -> JobRecord | None:
        row = await self._row("job", id, on=self._on(conn))
        return None if row is None else rows.job(row)

    async def journal(self, id: UUID, *, conn: Any = None) -> list[JournalRecord]:
        found = await self._fetch("journal", id, on=self._on(conn))
        return [rows.journal_entry(r) for r in found]

    async def query_jobs(self, filter: HistoryFilter, *, conn: Any = None) -> list[JobRecord]:
        found = await self._fetch(
            "query_jobs", filter.kind, filter.status.value if filter.status else None,
            filter.finished_since, filter.finished_until, filter.before, filter.limit,
            on=self._on(conn),
        )
        return [rows.job(r) for r in found]

    async def count(self, filter: CountFilter, *, conn: Any = None) -> int:
        statuses = [s.value for s in filter.statuses] if filter.statuses else ALL_STATUSES
        on = self._on(conn)
        if filter.subject is not None:
            n = await self._val("count_subject", filter.subject, filter.kind, statuses, on=on)
        elif filter.kind is not None:
            n = await self._val("count_kind", filter.kind, statuses, on=on)
        else:
            n = await self._val("count_all", statuses, on=on)
        return int(n)

    async def stats(self, *, conn: Any = None) -> Snapshot:
        snap = Snapshot()
        async with self.driver.session(self._on(conn)) as ex:
            active = await self._fetch("stats_active", on=ex)
            dead = await self._fetch("stats_dead", on=ex)
            finished = await self._val("stats_finished", on=ex)
            db_now = self.clock.now() or await self._val("db_now", on=ex)
        counts = dict.fromkeys(ALL_STATUSES, 0)
        for kind, status, runnable, n, oldest in active:
            counts[status] += n
            if status == "claimed":
                snap.claimed_by_kind[kind] = snap.claimed_by_kind.get(kind, 0) + n
            elif runnable:
                snap.pending_by_kind[kind] = n
                snap.oldest_pending_age[kind] = max(db_now - oldest, dt.timedelta(0))
            else:
                snap.scheduled_by_kind[kind] = n
        for kind, n in dead:
            snap.dead_by_kind[kind] = n
        counts["dead"] = sum(snap.dead_by_kind.values())
        counts["completed"] = int(finished) - counts["dead"]
        return Snapshot(
            pending_by_kind=snap.pending_by_kind, scheduled_by_kind=snap.scheduled_by_kind,
            oldest_pending_age=snap.oldest_pending_age, claimed=counts["claimed"],
            claimed_by_kind=snap.claimed_by_kind, dead_by_kind=snap.dead_by_kind,
            counts_by_status=counts,
        )

    async def detail(self, limit: int, *, conn: Any = None) -> Detail:
        on = self._on(conn)
        age = await self._val("oldest_runnable", on=on)
        found = await self._fetch("detail_failed", limit, on=on)
        return Detail(
            oldest_pending_age=None if age is None else max(age, dt.timedelta(0)),
            failed=[FailedJob(r[0], r[1], r[2], r[4], r[3]) for r in found],
        )
