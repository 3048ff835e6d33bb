"""The Queue's page arguments: creation-time bounds as id bounds, and the cursors
of pages ordered by a time (dead jobs, claimed jobs).

UUIDv7 ids carry their producer's clock at enqueue, to the millisecond, so
"created since T" is ``id >= uuid7_floor(T)`` and "created before T" is
``id < uuid7_floor(T)``: ranges of the primary key, whatever else the table holds.
"""

from __future__ import annotations

import datetime as dt
from uuid import UUID

from ._ids import uuid7_floor
from .errors import InvalidJobId


def _aware(when: dt.datetime | None, what: str) -> dt.datetime | None:
    if when is not None and (not isinstance(when, dt.datetime) or when.tzinfo is None):
        raise ValueError(f"{what} must be a timezone-aware datetime")
    return when


def id_range(since: dt.datetime | None, until: dt.datetime | None,
             before: UUID | None = None) -> tuple[UUID | None, UUID | None]:
    """(lowest id, id bound) for jobs created in ``[since, until)`` and below ``before``."""
    since, until = _aware(since, "created_since"), _aware(until, "created_until")
    if since is not None and until is not None and since >= until:
        raise ValueError("created_since must be earlier than created_until")
    if until is not None:
        floor = uuid7_floor(until)
        before = floor if before is None or floor < before else before
    return (None if since is None else uuid7_floor(since)), before


def time_cursor(at: dt.datetime | None, id: UUID) -> str:
    """The cursor naming a job in a page ordered by a time: ``<ISO time>|<id>``."""
    if at is None:
        raise ValueError("a job without the page's time cannot end a page")
    return f"{at.isoformat()}|{id}"


def parse_time_cursor(cursor: str | None) -> tuple[dt.datetime, UUID] | None:
    if cursor is None:
        return None
    at, sep, id = str(cursor).partition("|")
    try:
        if not sep:
            raise ValueError
        when = dt.datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError
        return when, UUID(id)
    except ValueError:
        raise InvalidJobId(f"cursor {str(cursor)[:80]!r} is not a page cursor "
                           "(pass the next_cursor of the previous page)") from None
