"""Inspecting: one job, its journal, history pages, counts, stats and detail."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from ..base import (
    CountFilter,
    Detail,
    FailedJob,
    FinishedMinute,
    HistoryFilter,
    JobRecord,
    JournalRecord,
    KeysetFilter,
    Snapshot,
    Status,
    WorkflowRecord,
)
from . import rows
from .operations import Operations

ALL_STATUSES = list(rows.STATUS)


class Inspecting(Operations):
    async def job(self, id: UUID, *, conn: Any = None) -> JobRecord | None:
        row = await self._row("job", id, on=self._on(conn))
        return None if row is None else rows.job(row)

    async def watch_job(self, id: UUID) -> JobRecord | None:
        row = await self._row("watch_job", id)
        return None if row is None else rows.job(row)

    async def results(self, ids: Sequence[UUID]) -> dict[UUID, Any]:
        found = await self._fetch("results", list(ids))
        return {r[0]: None if r[1] is None else rows.json_value(r[1]) for r in found}

    async def workflow(self, id: UUID, *, conn: Any = None) -> WorkflowRecord | None:
        async with self.driver.session(self._on(conn)) as ex:
            row = await self._row("workflow", id, on=ex)
            if row is None:
                return None
            steps = [(name, UUID(step)) for name, step in rows.json_value(row[3])]
            ids = [step for _, step in steps]
            found = await self._fetch("jobs_by_id", ids, on=ex)
            edges = await self._fetch("edges_of", ids, on=ex)
        after: dict[UUID, list[UUID]] = {}
        for job_id, after_id in edges:
            after.setdefault(job_id, []).append(after_id)
        return WorkflowRecord(row[0], row[1], row[2], steps,
                              {r[0]: rows.job(r) for r in found}, after)

    async def workflow_of(self, job: UUID) -> UUID | None:
        row = await self._row("workflow_of", job, on=self._on(None))
        return None if row is None else UUID(str(row[0]))

    async def dependencies(self, id: UUID) -> list[UUID]:
        return [r[0] for r in await self._fetch("dependencies", id)]

    async def journal(self, id: UUID, *, conn: Any = None) -> list[JournalRecord]:
        found = await self._fetch("journal", id, on=self._on(conn))
        return [rows.journal_entry(r) for r in found]

    async def query_jobs(self, filter: HistoryFilter, *, conn: Any = None) -> list[JobRecord]:
        f, on = filter, self._on(conn)
        status = f.status.value if f.status else None
        if f.subject is not None:
            found = await self._fetch(
                "query_jobs_subject", f.subject, f.kind, status, f.finished_since,
                f.finished_until, f.before, f.since_id, f.limit, on=on)
        else:
            found = await self._fetch(
                "query_jobs", f.kind, status, f.finished_since, f.finished_until, f.before,
                f.limit, f.since_id, on=on)
        return [rows.job(r) for r in found]

    async def dead_jobs(self, filter: KeysetFilter, *, conn: Any = None) -> list[JobRecord]:
        return await self._keyset("dead_jobs", filter, conn)

    async def claimed_jobs(self, filter: KeysetFilter, *, conn: Any = None) -> list[JobRecord]:
        return await self._keyset("claimed_jobs", filter, conn)

    async def _keyset(self, name: str, f: KeysetFilter, conn: Any) -> list[JobRecord]:
        at, last = f.after if f.after is not None else (None, None)
        found = await self._fetch(name, f.kind, at, last, f.since_id, f.before_id, f.limit,
                                  on=self._on(conn))
        return [rows.job(r) for r in found]

    async def periodic_jobs(self, *, conn: Any = None) -> list[JobRecord]:
        return [rows.job(r) for r in await self._fetch("periodic_jobs", on=self._on(conn))]

    async def finished_per_minute(self, since: dt.datetime, until: dt.datetime, limit: int, *,
                                  conn: Any = None) -> list[FinishedMinute]:
        found = await self._fetch("finished_per_minute", since, until, limit,
                                  on=self._on(conn))
        return [FinishedMinute(r[0], r[1], int(r[2]), int(r[3])) for r in found]

    async def count(self, filter: CountFilter, *, conn: Any = None) -> int:
        f, on = filter, self._on(conn)
        statuses = [s.value for s in f.statuses] if f.statuses else ALL_STATUSES
        if f.subject is not None:
            n = await self._val("count_subject", f.subject, f.kind, statuses, f.since_id,
                                f.before_id, f.at_most, on=on)
        elif f.bounded:
            n = await self._val("count_between", f.kind, statuses, f.since_id, f.before_id,
                                f.at_most, on=on)
        else:
            # Exact from the indexes and the tally; at_most only caps what it says.
            n = int(await self._val("count_status", f.kind, statuses, on=on))
            if f.at_most is not None:
                n = min(n, f.at_most)
        return int(n)

    async def stats(self, *, conn: Any = None) -> Snapshot:
        async with self.driver.session(self._on(conn)) as ex:
            parts = await self._fetch("stats", on=ex)
            db_now = self.clock.now() or await self._val("db_now", on=ex)
        snap = Snapshot()
        counts = dict.fromkeys(ALL_STATUSES, 0)
        for part, kind, runnable, n, oldest, entered in parts:
            n = int(n)
            if part == "pending":
                counts["pending"] += n
                if runnable:
                    snap.pending_by_kind[kind] = n
                    snap.oldest_pending_age[kind] = max(db_now - oldest, dt.timedelta(0))
                else:
                    snap.scheduled_by_kind[kind] = n
                continue
            counts[part] += n
            if part == "claimed":
                snap.claimed_by_kind[kind] = n
                continue
            totals = snap.completed_total_by_kind if part == Status.COMPLETED.value \
                else snap.dead_total_by_kind
            if entered:
                totals[kind] = int(entered)
            if n:
                by_kind = snap.completed_by_kind if part == Status.COMPLETED.value \
                    else snap.dead_by_kind
                by_kind[kind] = n
        return Snapshot(
            pending_by_kind=snap.pending_by_kind, scheduled_by_kind=snap.scheduled_by_kind,
            oldest_pending_age=snap.oldest_pending_age, claimed=counts["claimed"],
            claimed_by_kind=snap.claimed_by_kind, dead_by_kind=snap.dead_by_kind,
            counts_by_status=counts, completed_by_kind=snap.completed_by_kind,
            completed_total_by_kind=snap.completed_total_by_kind,
            dead_total_by_kind=snap.dead_total_by_kind,
        )

    async def detail(self, limit: int, *, conn: Any = None) -> Detail:
        on = self._on(conn)
        age = await self._val("oldest_runnable", on=on)
        found = await self._fetch("detail_failed", limit, on=on)
        return Detail(
            oldest_pending_age=None if age is None else max(age, dt.timedelta(0)),
            failed=[FailedJob(r[0], r[1], r[2], r[4], r[3]) for r in found],
        )
