"""MemoryStore: the storage contract in process memory, for users' tests.

It passes the same conformance suite as PostgresStore. Every operation runs
without awaiting in the middle, so under one event loop each is atomic, the
way a single SQL statement is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import orjson

from .. import _codec
from ..config import validate_prefix
from ..errors import ConfigError
from ..notices import encode, finished_messages, job_notice
from . import lifecycle
from .base import (
    ClaimRequest,
    Clock,
    DatabaseClock,
    Enqueued,
    IdentityLock,
    JobRecord,
    JournalRecord,
    LeaseRenewal,
    Listener,
    MergeFn,
    MergeUpdate,
    NewJob,
    Outcome,
    Settled,
    Settlement,
    Status,
    Store,
    WorkerInfo,
    WorkflowRecord,
    check_new_jobs,
)
from .memory_dependencies import WAITING, Edges
from .memory_sessions import MemoryIdentityLock, MemoryListener
from .memory_views import Rows, refuse_conn
from .memory_workflows import MemoryWorkflows

UTC = dt.UTC
_ACTIVE = (Status.PENDING, Status.CLAIMED)


class MemoryStore(MemoryWorkflows, Store):
    """An in-memory store with PostgresStore's semantics (no durability)."""

    def __init__(self, *, prefix: str = "venturi_", clock: Clock | None = None) -> None:
        self.prefix = validate_prefix(prefix)
        self.clock = clock or DatabaseClock()
        self._jobs = Rows()
        self._journal: dict[UUID, list[JournalRecord]] = {}
        self._journal_ids = itertools.count(1)
        self._workers: dict[tuple[str, str], WorkerInfo] = {}
        self._listeners: set[MemoryListener] = set()
        self._locks: dict[str, object] = {}  # worker name -> its identity lock's holder
        self._edges = Edges()
        self._awaited: set[UUID] = set()  # watch_job's flag: what a settle announces
        self._workflows: dict[UUID, WorkflowRecord] = {}
        self._step_of: dict[UUID, UUID] = {}  # step's job id -> its workflow
        self._flow_init()
        self.migrated = False

    # --- internals -------------------------------------------------------------------

    def _put(self, job: JobRecord, **changes: Any) -> JobRecord:
        new = dataclasses.replace(job, **changes)
        self._jobs[job.id] = new
        return new

    def _append(self, job: JobRecord, run_no: int, outcome: Outcome, note: str | None,
                attachment: Any = None) -> None:
        entry = JournalRecord(next(self._journal_ids), job.id, job.kind, run_no, self._now(),
                              outcome, note, attachment)
        self._journal.setdefault(job.id, []).append(entry)

    def _notify(self, channel: str, payload: str) -> None:
        for listener in list(self._listeners):
            listener.push(channel, payload)

    def _announce_finished(self, ids: Sequence[UUID]) -> None:
        """Tell result() waiters, as the settling statements do (notify_finished)."""
        for message in finished_messages(ids):
            self._notify("finished", message)

    def _periodic_taken(self, kind: str, ignore: UUID | None = None) -> bool:
        return any(
            j.periodic and j.kind == kind and j.status in _ACTIVE and j.id != ignore
            for j in self._jobs.values()
        )

    def _insert(self, job: NewJob, now: dt.datetime) -> JobRecord:
        if job.id in self._jobs:
            raise ConfigError(f"duplicate job id {job.id}")
        record = JobRecord(
            id=job.id, kind=job.kind, payload=orjson.loads(job.payload), priority=job.priority,
            status=Status.PENDING, created_at=now, visible_at=job.at or now + job.delay,
            claim_expires_at=None, claimed_by=None, finished_at=None, run_count=0,
            failure_count=0, max_failures=job.max_failures, carry=_codec.loads(job.carry),
            dedup_key=job.dedup_key, subject=job.subject, periodic=job.periodic,
            trace_context=_codec.loads(job.trace_context), limit_key=job.limit_key,
        )
        self._jobs[job.id] = record
        return record

    # --- schema ----------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        if self.migrated:
            return []
        self.migrated = True
        return ["memory"]

    # --- producing ---------------------------------------------------------------------

    async def enqueue(
        self, jobs: Sequence[NewJob], *, merge: MergeFn | None = None, conn: Any = None
    ) -> list[Enqueued]:
        refuse_conn(conn)
        check_new_jobs(jobs)
        now = self._now()
        # Work on a copy so a failure half-way leaves nothing behind (atomic batch).
        saved_jobs, saved_journal = dict(self._jobs), {k: list(v) for k, v in self._journal.items()}
        results: list[Enqueued] = []
        touched: list[UUID] = []
        try:
            if any(job.after for job in jobs):
                self._insert_waiting(jobs, now)
                self._announce([self._jobs[j.id] for j in jobs], now)
                return [Enqueued(j.id, False) for j in jobs]
            for job in jobs:
                if job.dedup_key is not None:
                    candidate = self._candidate(job.kind, job.dedup_key)
                    update = None
                    if candidate is not None:
                        update = merge(job, candidate) if merge else MergeUpdate()
                    if candidate is not None and update is not None:
                        requested = job.at or now + job.delay
                        self._merge(candidate, update, requested, None)
                        results.append(Enqueued(candidate.id, True))
                        touched.append(candidate.id)
                        continue
                self._insert(job, now)
                results.append(Enqueued(job.id, False))
                touched.append(job.id)
        except BaseException:
            self._jobs.restore(saved_jobs)
            self._journal = saved_journal
            raise
        self._announce([self._jobs[i] for i in touched], now)
        return results

    def _announce(self, jobs: Sequence[JobRecord], now: dt.datetime) -> None:
        """Notify like PostgreSQL does: per kind, ``kind`` for runnable work and
        ``kind|epoch`` for the earliest job due later."""
        runnable: set[str] = set()
        later: dict[str, dt.datetime] = {}
        for j in jobs:
            if j.status is not Status.PENDING:
                continue
            if j.visible_at > now:
                later[j.kind] = min(later.get(j.kind, j.visible_at), j.visible_at)
            else:
                runnable.add(j.kind)
        for kind in sorted(runnable):
            self._notify("jobs", kind)
        for kind, first in sorted(later.items()):
            self._notify("jobs", job_notice(kind, first, now))

    def _candidate(self, kind: str, key: str) -> JobRecord | None:
        found = [j for j in self._jobs.values()
                 if j.kind == kind and j.dedup_key == key and j.status is Status.PENDING]
        return min(found, key=lambda j: (j.created_at, j.id), default=None)

    def _merge(self, job: JobRecord, update: MergeUpdate, visible_at: dt.datetime | None,
               note: str | None) -> None:
        changes: dict[str, Any] = {}
        if update.payload is not None:
            changes["payload"] = orjson.loads(update.payload)
        if update.priority is not None:
            changes["priority"] = update.priority
        if update.set_carry:
            changes["carry"] = _codec.loads(update.carry)
        job = lifecycle.MERGE.apply(dataclasses.replace(job, **changes), self._now(),
                                    requested=visible_at)
        self._jobs[job.id] = job
        self._append(job, job.run_count, lifecycle.MERGE.outcome, note)

    async def dedup_candidate(self, kind: str, dedup_key: str) -> JobRecord | None:
        return self._candidate(kind, dedup_key)

    async def merge_into(
        self, id: UUID, update: MergeUpdate, *, visible_at: dt.datetime | None = None,
        note: str | None = None,
    ) -> bool:
        job = self._jobs.get(id)
        if job is None or job.status is not Status.PENDING:
            return False
        self._merge(job, update, visible_at, note)
        self._announce([self._jobs[id]], self._now())
        return True

    # --- working ------------------------------------------------------------------------

    def _runnable(self, kinds: Mapping[str, dt.timedelta], now: dt.datetime,
                  tier: int | None = None) -> list[JobRecord]:
        found = [
            j for j in self._jobs.values()
            if j.status is Status.PENDING and j.visible_at <= now and j.kind in kinds
            and (tier is None or j.priority == tier)
        ]
        found.sort(key=lambda j: (j.priority, j.visible_at, j.id))
        return found

    async def claim(self, request: ClaimRequest) -> list[JobRecord]:
        if request.limit <= 0 or not request.leases:
            return []
        now = self._now()
        low, normal = request.reservations()
        # Paused and limited kinds are claim_limited's (docs/concepts/flow-control.md).
        leases = {k: v for k, v in request.leases.items() if not self._controlled(k)}
        picked: list[JobRecord] = []
        picked.extend(self._runnable(leases, now, 2)[:low])
        picked.extend(self._runnable(leases, now, 1)[:normal])
        taken = {j.id for j in picked}
        room = max(request.limit - len(picked), 0)
        picked.extend([j for j in self._runnable(leases, now) if j.id not in taken][:room])
        return self._claim_picked(request, picked, now)

    async def runnable_left(self, kinds: Sequence[str]) -> bool:
        open_kinds = {k: dt.timedelta() for k in kinds if not self._paused(k)}
        return bool(self._runnable(open_kinds, self._now()))

    def _claim_picked(self, request: ClaimRequest, picked: list[JobRecord],
                      now: dt.datetime) -> list[JobRecord]:
        return [
            self._put(j, status=Status.CLAIMED, claimed_by=request.claimed_by,
                      run_count=j.run_count + 1,
                      claim_expires_at=now + request.leases[j.kind])
            for j in picked
        ]

    async def settle_many(
        self, claimed_by: str, settlements: Sequence[Settlement]
    ) -> list[Settled]:
        now = self._now()
        out: list[Settled] = []
        woke: list[JobRecord] = []
        finished: list[UUID] = []
        follower = self._follower()
        for s in settlements:
            job = self._jobs.get(s.id)
            if (job is None or job.status is not Status.CLAIMED or job.claimed_by != claimed_by
                    or job.run_count != s.run_no):
                out.append(Settled(s.id, False))
                continue
            t = lifecycle.settle(s.action, job.failure_count, job.max_failures)
            job = t.apply(job, now, delay=s.delay)
            if s.set_carry:
                job = dataclasses.replace(job, carry=_codec.loads(s.carry))
            if t.status is Status.COMPLETED:
                job = dataclasses.replace(job, result=_codec.loads(s.result))
            self._jobs[job.id] = job
            if t.status.terminal:
                finished.append(job.id)
                follower.finished(job.id, t.status is Status.DEAD, now)
            self._append(job, s.run_no, t.outcome, s.note, _codec.loads(s.attachment))
            if t.wakes:
                woke.append(job)
            if job.periodic and t.status.terminal and s.successor is not None:
                next_id, next_at = s.successor
                if not self._periodic_taken(job.kind) and next_id not in self._jobs:
                    self._jobs[next_id] = successor = dataclasses.replace(
                        job, id=next_id, status=Status.PENDING, created_at=now,
                        visible_at=max(next_at, now), claim_expires_at=None, claimed_by=None,
                        finished_at=None, run_count=0, failure_count=0, carry=None,
                        dedup_key=None, subject=None,
                        trace_context=_codec.loads(s.successor_trace), result=None,
                    )
                    woke.append(successor)  # announced like a retried row (settle.sql)
            out.append(Settled(s.id, True, t.status, t.outcome))
        self._announce(woke, now)
        self._announce_finished([id for id in finished if id in self._awaited])
        self._followed(follower)
        return out

    async def extend_leases(
        self, claimed_by: str, renewals: Sequence[LeaseRenewal]
    ) -> set[UUID]:
        now = self._now()
        held: set[UUID] = set()
        for r in renewals:
            job = self._jobs.get(r.id)
            if (job is not None and job.status is Status.CLAIMED and job.claimed_by == claimed_by
                    and job.run_count == r.run_no):
                self._put(job, claim_expires_at=now + r.lease)
                held.add(r.id)
        return held

    async def next_visible_at(self, kinds: Sequence[str]) -> dt.datetime | None:
        now = self._now()
        return min(
            (j.visible_at for j in self._jobs.values()
             if j.status is Status.PENDING and now < j.visible_at < WAITING and j.kind in kinds),
            default=None,
        )

    async def seed_periodic(self, jobs: Sequence[NewJob]) -> int:
        check_new_jobs(jobs)
        now = self._now()
        n = 0
        for job in jobs:
            if not self._periodic_taken(job.kind):
                self._insert(dataclasses.replace(job, periodic=True), now)
                n += 1
        return n

    # --- workers and control ---------------------------------------------------------------------

    async def heartbeat(self, info: WorkerInfo) -> None:
        key = (info.name, info.boot_id)
        self._workers[key] = dataclasses.replace(info, last_seen=self._now())

    async def forget_worker(self, name: str, boot_id: str) -> None:
        self._workers.pop((name, boot_id), None)

    async def workers(self) -> list[WorkerInfo]:
        return sorted(self._workers.values(), key=lambda w: (w.name, w.started_at))

    async def notify_control(self, message: Mapping[str, Any]) -> None:
        self._notify("control", encode(dict(message)))

    async def db_now(self) -> dt.datetime:
        return self._now()

    def listen(self) -> Listener:
        return MemoryListener(self._listeners)

    def listen_finished(self) -> Listener:
        return MemoryListener(self._listeners, frozenset({"finished"}))

    def identity_lock(self, name: str) -> IdentityLock:
        return MemoryIdentityLock(self._locks, name)
