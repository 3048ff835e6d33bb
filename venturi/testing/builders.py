"""Small builders for store-level tests: jobs, claim requests and settlements.

Kinds need no registered task at this level: the store stores any kind.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

from .._ids import uuid7
from ..store.base import Action, ClaimRequest, JobRecord, NewJob, Settlement, Store

LEASE = dt.timedelta(seconds=10)


def new_job(
    kind: str = "k",
    *,
    priority: int = 1,
    delay: float = 0,
    at: dt.datetime | None = None,
    payload: Any = None,
    max_failures: int = 25,
    **extra: Any,
) -> NewJob:
    return NewJob(
        id=uuid7(), kind=kind, payload=orjson.dumps(payload or {}).decode(), priority=priority,
        max_failures=max_failures, delay=dt.timedelta(seconds=delay), at=at, **extra,
    )


async def add(store: Store, *jobs: NewJob) -> list[NewJob]:
    await store.enqueue(list(jobs))
    return list(jobs)


def request(
    *kinds: str, limit: int = 10, by: str = "w/1", lease: dt.timedelta = LEASE, **kw: Any
) -> ClaimRequest:
    return ClaimRequest(by, {k: lease for k in (kinds or ("k",))}, limit, **kw)


async def claim_one(store: Store, *kinds: str, by: str = "w/1") -> JobRecord:
    claimed = await store.claim(request(*kinds, limit=1, by=by))
    assert len(claimed) == 1, f"expected one claimable job, got {claimed}"
    return claimed[0]


def settlement(job: JobRecord, action: Action, **kw: Any) -> Settlement:
    return Settlement(job.id, job.run_count, action, **kw)


async def job(store: Store, id: Any) -> JobRecord:
    row = await store.job(id)
    assert row is not None, f"job {id} is gone"
    return row
