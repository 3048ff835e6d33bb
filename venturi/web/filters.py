"""The jobs page's filter: parsed from the URL, turned back into one, counted and
read as keyset pages by the store's own queries, none of which reads the table
beyond the rows it returns (docs/operations/dashboard.md, the costs).

- A subject is a subtree, as ``Queue.count`` and ``Queue.cancel`` read it (the
  subject itself and everything below ``subject/``); ``history(subject=...)``
  reads it by the subject index.
- Time bounds are on the creation time the ids carry (UUIDv7: the producer's
  clock at enqueue), so they are ranges of the primary key.
- Dead jobs are listed by their own index, most recently dead first; claimed
  ones by theirs, soonest lease expiry first; everything else newest first.
- Counts come from the stats (kind and status) or from ``Queue.count``, which
  stops at :data:`COUNT_CAP` where it would have to read rows (subjects, time
  bounds): a page that shows "more than 10,000" pays for 10,001 index entries.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from venturi._ids import uuid7_floor, uuid7_time
from venturi.errors import InvalidJobId
from venturi.queue import Page, Queue
from venturi.store.records import JobRecord, Snapshot
from venturi.store.statuses import Status

PAGE = 50
COUNT_CAP = 10_001  # one more than an action's walk takes (bulk.WALK_MAX)
MAX_SUBJECT = 1_000
__all__ = ["COUNT_CAP", "PAGE", "FilterError", "JobFilter", "Listing", "Total", "id_time",
           "known_count", "list_jobs", "match_count", "order_of", "uuid7_floor"]


def id_time(id: uuid.UUID) -> dt.datetime | None:
    """The creation time a UUIDv7 carries (None for other versions)."""
    return uuid7_time(id)


class FilterError(ValueError):
    """A filter field that does not parse; the message names it."""


def _time(value: str, field: str) -> dt.datetime | None:
    value = value.strip()
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{field}: {value!r} is not a date and time (YYYY-MM-DDTHH:MM)") from None
    if parsed.tzinfo is None:  # the form's datetime-local fields are labelled UTC
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC)


def _form_time(value: dt.datetime | None) -> str:
    """What a datetime-local field holds (UTC), to the millisecond ids keep."""
    if value is None:
        return ""
    # The shortest form, as a browser normalises the field's value: no zero seconds,
    # no trailing zeros in the milliseconds ("...T10:30:09.59", not "...09.590").
    value = value.astimezone(dt.UTC)
    text = value.strftime("%Y-%m-%dT%H:%M")
    millis = value.microsecond // 1000
    if millis:
        return text + f":{value.second:02d}." + f"{millis:03d}".rstrip("0")
    return text + f":{value.second:02d}" if value.second else text


@dataclass(frozen=True, slots=True)
class JobFilter:
    kind: str | None = None
    status: Status | None = None
    subject: str | None = None  # a subtree: no trailing "/"
    since: dt.datetime | None = None  # created at or after
    until: dt.datetime | None = None  # created before

    @classmethod
    def parse(cls, params: Mapping[str, Any]) -> JobFilter:
        def text(name: str) -> str:
            value = params.get(name)
            return value.strip() if isinstance(value, str) else ""

        status = text("status")
        if status and status not in {s.value for s in Status}:
            raise FilterError(f"status: {status!r} is not one of "
                              f"{', '.join(s.value for s in Status)}")
        subject = text("subject").rstrip("/")
        if len(subject) > MAX_SUBJECT or "\x00" in subject:
            raise FilterError("subject: too long or not text")
        if text("subject") and not subject.strip():
            raise FilterError("subject: empty after stripping '/' (it would match every job)")
        since, until = _time(text("since"), "since"), _time(text("until"), "until")
        if since and until and since >= until:
            raise FilterError("since must be earlier than until")
        return cls(kind=text("kind") or None, status=Status(status) if status else None,
                   subject=subject or None, since=since, until=until)

    @property
    def empty(self) -> bool:
        return self == JobFilter()

    @property
    def timed(self) -> bool:
        return self.since is not None or self.until is not None

    def params(self) -> dict[str, str]:
        """The filter as URL parameters (empty fields left out)."""
        out = {"kind": self.kind or "", "status": self.status.value if self.status else "",
               "subject": self.subject or "", "since": _form_time(self.since),
               "until": _form_time(self.until)}
        return {k: v for k, v in out.items() if v}

    def query(self, **extra: str | None) -> str:
        params = self.params()
        params.update({k: v for k, v in extra.items() if v})
        return urlencode(params)

    def without(self, field: str) -> JobFilter:
        return replace(self, **{field: None})


def known_count(f: JobFilter, snap: Snapshot) -> int | None:
    """How many jobs match a kind/status filter, from the stats (None: they do not say)."""
    if f.subject is not None or f.timed:
        return None
    per_kind: dict[str, int] | None = None
    if f.status is Status.PENDING:
        total = dict(snap.pending_by_kind)
        for kind, n in snap.scheduled_by_kind.items():
            total[kind] = total.get(kind, 0) + n
        per_kind = total
    elif f.status is Status.CLAIMED:
        per_kind = snap.claimed_by_kind
    elif f.status is Status.DEAD:
        per_kind = snap.dead_by_kind
    elif f.status is Status.COMPLETED:
        per_kind = snap.completed_by_kind
    if per_kind is not None:
        return per_kind.get(f.kind, 0) if f.kind is not None else sum(per_kind.values())
    if f.kind is None:
        return sum(snap.counts_by_status.values())
    return sum(by_kind.get(f.kind, 0) for by_kind in (
        snap.pending_by_kind, snap.scheduled_by_kind, snap.claimed_by_kind,
        snap.completed_by_kind, snap.dead_by_kind))


@dataclass(frozen=True, slots=True)
class Total:
    """How many jobs a filter matches: ``n`` exactly, or at least ``n`` when not exact
    (the count stopped at :data:`COUNT_CAP`)."""

    n: int
    exact: bool = True


async def match_count(queue: Queue, f: JobFilter, snap: Snapshot) -> Total:
    """The filter's total: from the stats where they say, else a bounded count."""
    known = known_count(f, snap)
    if known is not None:
        return Total(known)
    n = await queue.count(kind=f.kind, subject=f.subject,
                          statuses=[f.status] if f.status else None,
                          created_since=f.since, created_until=f.until, at_most=COUNT_CAP)
    return Total(n, exact=n < COUNT_CAP)


def order_of(f: JobFilter) -> str:
    """How the filter's jobs are listed: ``dead`` (most recently dead first, on the dead
    jobs' index), ``claimed`` (soonest lease expiry first, on the expiry index), or
    ``newest`` (by id, newest first)."""
    if f.subject is None and f.status is Status.DEAD:
        return "dead"
    if f.subject is None and f.status is Status.CLAIMED:
        return "claimed"
    return "newest"


@dataclass(frozen=True, slots=True)
class Listing:
    jobs: list[JobRecord]
    next_cursor: str | None
    order: str = "newest"


def _cursor(raw: str | None) -> uuid.UUID | None:
    if not raw:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise InvalidJobId(f"cursor {raw[:80]!r} is not a page cursor") from None


async def list_jobs(queue: Queue, f: JobFilter, snap: Snapshot, *, cursor: str | None = None,
                    limit: int = PAGE, upto: uuid.UUID | None = None) -> Listing:
    """One page of the jobs matching ``f``, after ``cursor`` (a previous page's
    ``next_cursor``), among those created before id ``upto`` if given. A bad cursor
    raises ``InvalidJobId``."""
    until = f.until
    if upto is not None:
        bound = uuid7_time(upto)
        until = bound if until is None or (bound is not None and bound < until) else until
    since = f.since
    if since is not None and until is not None and since >= until:
        return Listing([], None, order_of(f))
    order = order_of(f)
    page: Page
    if order == "dead":
        page = await queue.dead_jobs(kind=f.kind, before=cursor or None, limit=limit,
                                     created_since=since, created_until=until)
    elif order == "claimed":
        page = await queue.claimed_jobs(kind=f.kind, after=cursor or None, limit=limit,
                                        created_since=since, created_until=until)
    else:
        before = _cursor(cursor)
        # PostgreSQL may plan a prepared history statement generically, and then walks
        # the primary key for a status; where the stats count the matches, never ask
        # for more than there are (docs/operations/dashboard.md).
        cap = known_count(f, snap) if f.status is Status.PENDING else None
        want = limit if cap is None else min(limit, cap)
        if want <= 0:
            return Listing([], None, order)
        page = await queue.history(kind=f.kind, status=f.status, subject=f.subject,
                                   created_since=since, created_until=until, before=before,
                                   limit=want)
        if cap is not None and want < limit:
            return Listing(page.jobs, None, order)
    return Listing(page.jobs, page.next_cursor, order)
