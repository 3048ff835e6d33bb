"""The jobs page's filter: parsed from the URL, turned back into one, and read
as keyset pages through ``Queue.history`` without scanning the table.

``history`` filters by kind and status in the database and pages on the
primary key, newest first. The rest is done here, over those pages, each
request reading a bounded number of rows:

- Time bounds use the id: UUIDv7 ids carry the producer's clock at enqueue,
  so "created before T" is the keyset cursor ``id < uuid7(T)`` and
  "created since T" is where paging stops.
- A subject is a subtree, as ``Queue.count`` and ``Queue.cancel`` read it (the
  subject itself and everything below ``subject/``), matched over at most
  :data:`SCAN_BUDGET` rows per request; the page says how far it looked and
  offers to look further. Its total comes from ``Queue.count(subject=...)``,
  which the subject index serves.
- A status whose count the stats queries know (pending, claimed, dead) caps
  the page's LIMIT at that count, so a filter matching three jobs stops at the
  third instead of walking the rest of the primary key looking for a fourth.

docs/operations/dashboard.md lists the store queries that would do all of
this in the database.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from venturi.queue import Queue
from venturi.store.records import JobRecord, Snapshot, Status

PAGE = 50
BATCH = 200
SCAN_BUDGET = 2_000
MAX_SUBJECT = 1_000


class FilterError(ValueError):
    """A filter field that does not parse; the message names it."""


def uuid7_floor(when: dt.datetime) -> uuid.UUID:
    """The smallest UUIDv7 of ``when``'s millisecond: ids below it were made earlier."""
    ms = int(when.timestamp() * 1000)
    return uuid.UUID(int=(ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | 0b10 << 62)


def id_time(id: uuid.UUID) -> dt.datetime | None:
    """The creation time a UUIDv7 carries (None for other versions)."""
    if id.version != 7:
        return None
    return dt.datetime.fromtimestamp((id.int >> 80) / 1000, dt.UTC)


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

    def matches(self, job: JobRecord) -> bool:
        """The conditions ``history`` cannot apply itself."""
        if self.subject is not None:
            subject = job.subject or ""
            if subject != self.subject and not subject.startswith(self.subject + "/"):
                return False
        return self.since is None or job.id >= uuid7_floor(self.since)


def known_count(f: JobFilter, snap: Snapshot) -> int | None:
    """How many jobs match a kind/status filter, from the stats queries (None: unknown)."""
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
    if per_kind is not None:
        return per_kind.get(f.kind, 0) if f.kind is not None else sum(per_kind.values())
    if f.kind is None:
        counts = snap.counts_by_status
        if f.status is None:
            return sum(counts.values())
        return counts.get(f.status.value, 0)
    return None  # completed (or any status) of one kind: the stats do not split it


def why_uncounted(f: JobFilter) -> str:
    """Why :func:`match_count` has no number for ``f`` (docs/operations/dashboard.md)."""
    if f.timed:
        return "no count query covers time bounds yet"
    return "the stats do not count finished jobs per kind"


async def match_count(queue: Queue, f: JobFilter, snap: Snapshot) -> int | None:
    """The filter's total where an indexed count exists for it."""
    known = known_count(f, snap)
    if known is not None or f.subject is None or f.timed:
        return known
    return await queue.count(subject=f.subject, kind=f.kind,
                             statuses=[f.status] if f.status else None)


@dataclass(frozen=True, slots=True)
class Listing:
    jobs: list[JobRecord]
    next_cursor: str | None
    examined: int  # rows read past the database's own filter (subject mode)
    reached: dt.datetime | None  # creation time of the oldest row examined
    budget_spent: bool


async def list_jobs(queue: Queue, f: JobFilter, snap: Snapshot, *,
                    before: uuid.UUID | None = None, limit: int = PAGE) -> Listing:
    """One page of jobs matching ``f``, newest first, after cursor ``before``."""
    cursor = before
    if f.until is not None:
        floor = uuid7_floor(f.until)
        cursor = floor if cursor is None or floor < cursor else cursor
    stop = uuid7_floor(f.since) if f.since is not None else None
    cap = known_count(replace(f, subject=None, since=None, until=None), snap) \
        if f.status in (Status.PENDING, Status.CLAIMED, Status.DEAD) else None
    status = f.status.value if f.status else None

    if f.subject is None:
        want = limit + 1 if cap is None else min(limit + 1, cap)
        if want <= 0:
            return Listing([], None, 0, None, False)
        page = await queue.history(kind=f.kind, status=status, before=cursor, limit=want)
        rows = [j for j in page.jobs if stop is None or j.id >= stop]
        more = len(rows) > limit
        rows = rows[:limit]
        return Listing(rows, str(rows[-1].id) if more else None, 0, None, False)

    found: list[JobRecord] = []
    examined = 0
    last: JobRecord | None = None
    exhausted = False  # nothing older can match: no next page
    remaining = cap
    while len(found) <= limit and examined < SCAN_BUDGET:
        want = BATCH if remaining is None else min(BATCH, remaining)
        if want <= 0:
            exhausted = True
            break
        page = await queue.history(kind=f.kind, status=status, before=cursor, limit=want)
        if remaining is not None:
            remaining -= len(page.jobs)
        for job in page.jobs:
            if stop is not None and job.id < stop:
                exhausted = True
                break
            examined += 1
            last = job
            if f.matches(job):
                found.append(job)
        if exhausted or len(page.jobs) < want:
            exhausted = True
            break
        cursor = page.jobs[-1].id
    if len(found) > limit:
        rows = found[:limit]
        return Listing(rows, str(rows[-1].id), examined, id_time(rows[-1].id), False)
    spent = not exhausted and last is not None
    return Listing(found, str(last.id) if spent and last is not None else None, examined,
                   id_time(last.id) if last is not None else None, spent)
