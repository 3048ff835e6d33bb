"""The messages that cross process boundaries on a queue's two channels.

``{prefix}jobs`` carries wake-ups: ``kind`` when work of that kind is runnable
now, ``kind|EPOCH`` (seconds since 1970, UTC, as PostgreSQL's ``extract(epoch
...)`` prints it) when the earliest such job becomes visible later. The SQL of
the PostgreSQL store builds the same text in the statements that write jobs;
a test holds the two to this module's parser.

``{prefix}results`` carries the ids of jobs that just finished (completed, went
dead, or were cancelled), comma-separated, at most :data:`FINISHED_CHUNK` per
message: what wakes ``Queue.result`` (docs/concepts/results.md). The settling,
recovering and cancelling statements build it in SQL (``notify_finished``).

``{prefix}control`` carries JSON objects with an ``op``: ``cancel`` (ids of
claimed jobs just deleted, at most :data:`CANCEL_CHUNK` per message so one
stays well under NOTIFY's 8000-byte payload limit), ``drain`` (a worker
name or every worker, and an optional grace in seconds) and ``kinds`` (the
rows of ``{prefix}kinds`` of these kinds changed: a pause, a resume, a limit;
docs/concepts/flow-control.md).

Anyone who can reach the database can send on these channels: parsing never
raises for a message it does not understand (see :func:`parse_control`).
Everything here is built and parsed by this module and nowhere else.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson

CANCEL_CHUNK = 100
FINISHED_CHUNK = 100


class InvalidNotice(ValueError):
    """A control message with a known ``op`` whose fields are malformed."""


# --- {prefix}jobs -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobNotice:
    """Work of ``kind`` is runnable now (``due`` None) or becomes visible at ``due``."""

    kind: str
    due: dt.datetime | None = None


def job_notice(kind: str, visible_at: dt.datetime, now: dt.datetime) -> str:
    """The wake-up for a job of ``kind`` visible at ``visible_at``."""
    if visible_at > now:
        return f"{kind}|{visible_at.timestamp()}"
    return kind


def parse_job_notice(payload: str) -> JobNotice:
    """A wake-up's kind and due time. A due part that is not a number reads as
    "runnable now": waking too early costs one claim, too late a missed job."""
    kind, _, due = payload.partition("|")
    if not due:
        return JobNotice(kind)
    try:
        seconds = float(due)
        when = dt.datetime.fromtimestamp(seconds, dt.UTC)
    except (ValueError, OverflowError, OSError):
        return JobNotice(kind)
    return JobNotice(kind, when)


# --- {prefix}results -------------------------------------------------------------


def finished_messages(ids: Iterable[UUID | str]) -> list[str]:
    """The wire form of "these jobs finished": one message per :data:`FINISHED_CHUNK` ids."""
    text = [str(i) for i in ids]
    return [",".join(text[start:start + FINISHED_CHUNK])
            for start in range(0, len(text), FINISHED_CHUNK)]


def parse_finished(payload: str) -> list[UUID]:
    """The ids of a finished message; parts that are not UUIDs are skipped (anyone who
    can reach the database can send on the channel: a waiter re-reads its job anyway)."""
    ids = []
    for part in payload.split(","):
        with contextlib.suppress(ValueError):
            ids.append(UUID(part.strip()))
    return ids


# --- {prefix}control --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cancel:
    """These claimed jobs were deleted: their owners stop them and settle nothing."""

    ids: tuple[UUID, ...]


@dataclass(frozen=True, slots=True)
class Drain:
    """Worker ``worker`` (every worker when None) drains, with ``grace`` seconds if given."""

    worker: str | None = None
    grace: float | None = None


@dataclass(frozen=True, slots=True)
class KindsChanged:
    """The pause or limits of these kinds changed: workers re-read them."""

    kinds: tuple[str, ...]


ControlMessage = Cancel | Drain | KindsChanged


def kinds_message(kinds: Iterable[str]) -> dict[str, Any]:
    """The wire form of a change to kinds' controls (what ``control_kind`` sends)."""
    return {"op": "kinds", "kinds": list(kinds)}


def drain_message(worker: str | None = None, grace: float | None = None) -> dict[str, Any]:
    """The wire form of a drain request (what ``notify_control`` sends)."""
    if grace is not None:
        _check_grace(grace)
    return {"op": "drain", "worker": worker, "grace": grace}


def cancel_messages(ids: Iterable[UUID | str]) -> list[dict[str, Any]]:
    """The wire form of a cancel: one message per :data:`CANCEL_CHUNK` ids."""
    text = [str(i) for i in ids]
    return [{"op": "cancel", "ids": text[start:start + CANCEL_CHUNK]}
            for start in range(0, len(text), CANCEL_CHUNK)]


def encode(message: dict[str, Any]) -> str:
    return orjson.dumps(message).decode()


def parse_control(payload: str) -> ControlMessage | None:
    """A control message, or None for one of an ``op`` this version does not know
    (a newer sender's). Raises :class:`InvalidNotice` when the payload is not a
    JSON object or a known ``op`` has malformed fields; ids that are not UUIDs are
    skipped, not fatal, so one bad id cannot hide the others' cancellation."""
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise InvalidNotice("control message is not JSON") from None
    if not isinstance(message, dict):
        raise InvalidNotice("control message is not a JSON object")
    op = message.get("op")
    if op == "cancel":
        raw = message.get("ids")
        if not isinstance(raw, list):
            raise InvalidNotice("cancel ids must be a list")
        ids = []
        for item in raw:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                ids.append(UUID(item))
        return Cancel(tuple(ids))
    if op == "drain":
        worker = message.get("worker")
        if worker is not None and not isinstance(worker, str):
            raise InvalidNotice("drain worker must be a name or null")
        grace = message.get("grace")
        if grace is not None:
            _check_grace(grace)
            grace = float(grace)
        return Drain(worker, grace)
    if op == "kinds":
        names = message.get("kinds")
        if not isinstance(names, list):
            raise InvalidNotice("kinds must be a list")
        return KindsChanged(tuple(k for k in names if isinstance(k, str)))
    return None


def _check_grace(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidNotice("grace must be a number of seconds")
    if not math.isfinite(value) or value < 0:
        raise InvalidNotice("grace must be finite and not negative")
