"""Rows of the named statements as records, whatever driver fetched them.

A driver hands rows over as indexable sequences (asyncpg's ``Record``, a tuple)
with jsonb columns as their JSON text; columns come in the order the
statements select them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

import orjson

from ... import _codec
from ..base import (
    JobRecord,
    JournalRecord,
    LeaseRenewal,
    Outcome,
    Recovered,
    Settlement,
    Status,
    WorkerInfo,
)
from .driver import Row

# Enum lookups by value without the enum machinery's call: once per claimed or settled row.
STATUS = {s.value: s for s in Status}
OUTCOME = {o.value: o for o in Outcome}


def json_value(text: str) -> Any:
    """jsonb text as Python. jsonb holds what orjson refuses, from rows written by other
    software: numbers beyond a double (``1e400``, printed as a 401-digit integer) and
    nesting deeper than 1,024 levels. The standard library parses the numbers; for
    what neither parses the text itself stands in, so the task's decoding refuses it
    (``payload-...``) and the job, not the claim and the worker, dies of it."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def job(r: Row) -> JobRecord:
    """A row of the job columns every statement that returns jobs selects, in order."""
    carry, trace, result = r[13], r[17], r[19]
    return JobRecord(
        id=r[0], kind=r[1], payload=json_value(r[2]), priority=r[3], status=STATUS[r[4]],
        created_at=r[5], visible_at=r[6], claim_expires_at=r[7], claimed_by=r[8],
        finished_at=r[9], run_count=r[10], failure_count=r[11], max_failures=r[12],
        carry=None if carry is None else json_value(carry), dedup_key=r[14],
        subject=r[15], periodic=r[16], trace_context=None if trace is None else json_value(trace),
        limit_key=r[18], result=None if result is None else json_value(result), waiting=r[20],
    )


def journal_entry(r: Row) -> JournalRecord:
    return JournalRecord(r[0], r[1], r[2], r[3], r[4], OUTCOME[r[5]], r[6], _codec.loads(r[7]))


def recovered(r: Row) -> Recovered:
    return Recovered(r[0], r[1], r[2], STATUS[r[3]], r[4])


def worker(r: Row) -> WorkerInfo:
    return WorkerInfo(name=r[0], boot_id=r[1], host=r[2], pid=r[3], kinds=list(r[4]),
                      concurrency=r[5], in_flight=r[6], started_at=r[7], last_seen=r[8],
                      draining=r[9])


def encode(value: Any) -> str:
    """A parameter the statement reads as jsonb, as JSON text (no driver codec needed)."""
    return orjson.dumps(value).decode()


def micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_Keyed = TypeVar("_Keyed", Settlement, LeaseRenewal)


def by_id(items: Sequence[_Keyed]) -> Iterator[dict[UUID, _Keyed]]:
    """The batch keyed by job id, in rounds: the settle and renewal statements find
    each row's input under its id, so two epochs of one id go in separate rounds."""
    rest = list(items)
    while rest:
        keyed = {x.id: x for x in reversed(rest)}  # the first of each id this round
        yield keyed
        rest = [x for x in rest if keyed[x.id] is not x]
