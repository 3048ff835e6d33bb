"""Queue's reads for an operator: journals, statistics, counts, paged history,
periodic jobs and workers (a mixin of :class:`~venturi.Queue`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from . import _pages
from .newjob import parse_uuid
from .store.base import (
    CountFilter,
    Detail,
    FinishedMinute,
    HistoryFilter,
    JobRecord,
    JournalRecord,
    KeysetFilter,
    Snapshot,
    Status,
    Store,
    WorkerInfo,
)

_FOREVER = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of history, newest first; pass ``next_cursor`` as ``before=``."""

    jobs: list[JobRecord]
    next_cursor: str | None


def parse_status(value: Status | str, what: str = "status") -> Status:
    try:
        return Status(value)
    except ValueError:
        raise ValueError(
            f"{what} {value!r} is not one of {', '.join(s.value for s in Status)}"
        ) from None


def normalize_subject(subject: str) -> str:
    """Strip trailing ``/``: ``file:///a/`` names the same subtree as ``file:///a``."""
    if not isinstance(subject, str):
        raise TypeError("subject must be a string")
    stripped = subject.rstrip("/")
    if not stripped.strip():
        raise ValueError("subject is empty after stripping '/': refusing to match every job")
    return stripped


class QueueViews:
    """The inspecting part of Queue (a mixin: the queue holds the store)."""

    store: Store

    async def journal(self, id: UUID | str, *, conn: Any = None) -> list[JournalRecord]:
        """The job's journal, oldest entry first (empty for an unknown job)."""
        return await self.store.journal(parse_uuid(id), conn=conn)

    async def stats(self, *, conn: Any = None) -> Snapshot:
        """Counts per kind and status, and how long the oldest runnable job has waited."""
        return await self.store.stats(conn=conn)

    async def detail(self, limit: int = 20, *, conn: Any = None) -> Detail:
        """The oldest runnable job's age and the ``limit`` newest dead jobs with their reasons."""
        if limit < 0:
            raise ValueError("limit must be >= 0")
        return await self.store.detail(limit, conn=conn)

    async def history(
        self,
        *,
        kind: str | None = None,
        status: Status | str | None = None,
        finished_since: dt.datetime | None = None,
        finished_until: dt.datetime | None = None,
        before: str | UUID | None = None,
        limit: int = 50,
        subject: str | None = None,
        created_since: dt.datetime | None = None,
        created_until: dt.datetime | None = None,
        conn: Any = None,
    ) -> Page:
        """Jobs newest first, one keyset page at a time. ``subject``: its subtree, as
        ``count`` and ``cancel`` read it. ``created_since``/``created_until``: by the
        creation time the ids carry (the producer's clock at enqueue, to the
        millisecond), which makes them ranges of the primary key."""
        _check_limit(limit)
        cursor = None if before is None else parse_uuid(before, what="cursor")
        since_id, cursor = _pages.id_range(created_since, created_until, cursor)
        rows = await self.store.query_jobs(HistoryFilter(
            kind=kind, status=None if status is None else parse_status(status),
            finished_since=finished_since, finished_until=finished_until,
            before=cursor, limit=limit + 1,
            subject=None if subject is None else normalize_subject(subject), since_id=since_id,
        ), conn=conn)
        return _page(rows, limit, lambda j: str(j.id))

    async def dead_jobs(
        self, *, kind: str | None = None, before: str | None = None, limit: int = 50,
        created_since: dt.datetime | None = None, created_until: dt.datetime | None = None,
        conn: Any = None,
    ) -> Page:
        """Dead jobs, the most recently dead first, one page at a time (pass
        ``next_cursor`` as ``before=``). Read in the order of the dead jobs' own
        index, so a page costs its own rows however many jobs completed."""
        return _page(await self.store.dead_jobs(self._keyset(
            kind, before, limit, created_since, created_until), conn=conn), limit,
            lambda j: _pages.time_cursor(j.finished_at, j.id))

    async def claimed_jobs(
        self, *, kind: str | None = None, after: str | None = None, limit: int = 50,
        created_since: dt.datetime | None = None, created_until: dt.datetime | None = None,
        conn: Any = None,
    ) -> Page:
        """Claimed (running) jobs, the soonest lease expiry first, one page at a time
        (pass ``next_cursor`` as ``after=``). A renewal moves a job's expiry, so a job
        renewed between two pages can appear on both or neither."""
        return _page(await self.store.claimed_jobs(self._keyset(
            kind, after, limit, created_since, created_until), conn=conn), limit,
            lambda j: _pages.time_cursor(j.claim_expires_at, j.id))

    @staticmethod
    def _keyset(kind: str | None, cursor: str | None, limit: int,
                since: dt.datetime | None, until: dt.datetime | None) -> KeysetFilter:
        _check_limit(limit)
        since_id, before_id = _pages.id_range(since, until)
        return KeysetFilter(kind=kind, after=_pages.parse_time_cursor(cursor),
                            since_id=since_id, before_id=before_id, limit=limit + 1)

    async def periodic_jobs(self, *, conn: Any = None) -> list[JobRecord]:
        """Each periodic kind's pending or claimed occurrence (its next run), by kind."""
        return await self.store.periodic_jobs(conn=conn)

    async def finished_per_minute(
        self, since: dt.datetime, until: dt.datetime | None = None, *, limit: int = 100_000,
        conn: Any = None,
    ) -> list[FinishedMinute]:
        """Jobs finished from ``since`` to ``until`` (default: now), per minute and
        kind, oldest minute first; of the jobs still in the table, at most the
        ``limit`` most recently finished are read (a bounded cost, however busy the
        queue), so when ``limit`` is reached the oldest minute is partial."""
        if since.tzinfo is None or (until is not None and until.tzinfo is None):
            raise ValueError("since and until must be timezone-aware")
        if limit < 1:
            raise ValueError("limit must be >= 1")
        return await self.store.finished_per_minute(since, until or _FOREVER, limit, conn=conn)

    async def count(
        self,
        *,
        kind: str | None = None,
        subject: str | None = None,
        statuses: Sequence[Status | str] | None = None,
        created_since: dt.datetime | None = None,
        created_until: dt.datetime | None = None,
        at_most: int | None = None,
        conn: Any = None,
    ) -> int:
        """Jobs of ``kind`` and/or in ``subject``'s subtree, in ``statuses`` (any by
        default), created in ``[created_since, created_until)`` if given. With
        ``at_most``, counting stops there: a bounded read for a page that only needs
        to know whether there are more."""
        if at_most is not None and at_most < 0:
            raise ValueError("at_most must be >= 0")
        since_id, before_id = _pages.id_range(created_since, created_until)
        return await self.store.count(CountFilter(
            kind=kind,
            subject=None if subject is None else normalize_subject(subject),
            statuses=None if statuses is None else tuple(parse_status(s) for s in statuses),
            since_id=since_id, before_id=before_id, at_most=at_most,
        ), conn=conn)

    async def workers(self) -> list[WorkerInfo]:
        """The workers registered on this queue, with their last heartbeat."""
        return await self.store.workers()


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= 10_000:
        raise ValueError("limit must be between 1 and 10000")


def _page(rows: list[JobRecord], limit: int, cursor: Any) -> Page:
    """A page of at most ``limit`` of ``rows`` (read one more than that: whether
    there is a next page); ``cursor(job)`` names the last one."""
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, cursor(rows[-1]) if more else None)
