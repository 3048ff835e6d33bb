"""MemoryStore's recovery of expired and orphaned claims, with the semantics of the
recovery statements (docs/concepts/leases.md): the run is journaled, the job retried or
dead, and a dead job's dependents follow."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from uuid import UUID

from . import lifecycle
from .base import JobRecord, Outcome, Recovered, Status
from .lifecycle import Recovery
from .memory_dependencies import Follower
from .memory_flow import MemoryFlow


class MemoryRecovery(MemoryFlow):
    """The recovery part of MemoryStore (a mixin: the store holds the rows)."""

    def _append(self, job: JobRecord, run_no: int, outcome: Outcome, note: str | None,
                attachment: object = None) -> None:
        raise NotImplementedError

    def _announce(self, jobs: Sequence[JobRecord], now: dt.datetime) -> None:
        raise NotImplementedError

    def _announce_finished(self, ids: Sequence[UUID]) -> None:
        raise NotImplementedError

    def _follower(self) -> Follower:
        raise NotImplementedError

    def _followed(self, follower: Follower) -> None:
        raise NotImplementedError

    def _stale(self, now: dt.datetime) -> list[JobRecord]:
        found = [j for j in self._jobs.values() if j.status is Status.CLAIMED
                 and j.claim_expires_at is not None and j.claim_expires_at < now]
        found.sort(key=lambda j: (j.claim_expires_at or now, j.id))
        return found

    def _recover(self, job: JobRecord, now: dt.datetime, why: Recovery) -> Recovered:
        owner = job.claimed_by or ""
        t = lifecycle.recover(job.failure_count, job.max_failures)
        job = self._jobs[job.id] = t.apply(job, now)
        self._append(job, job.run_count, t.outcome, why.value)
        return Recovered(job.id, job.kind, job.run_count, job.status, owner)

    async def find_stale(self, limit: int = 1000) -> list[JobRecord]:
        return self._stale(self._now())[:limit]

    async def recover(self, id: UUID, run_no: int) -> Recovered | None:
        now = self._now()
        job = self._jobs.get(id)
        if (job is None or job.status is not Status.CLAIMED or job.run_count != run_no
                or job.claim_expires_at is None or not job.claim_expires_at < now):
            return None
        result = self._recover(job, now, Recovery.LEASE_EXPIRED)
        self._wake([result], now)
        return result

    async def recover_stale(self, limit: int = 1000) -> list[Recovered]:
        now = self._now()
        results = [self._recover(j, now, Recovery.LEASE_EXPIRED) for j in self._stale(now)[:limit]]
        self._wake(results, now)
        return results

    async def recover_boot(self, name: str, claimed_by: str) -> list[Recovered]:
        now = self._now()
        mine = [
            j for j in self._jobs.values()
            if j.status is Status.CLAIMED and j.claimed_by is not None
            and j.claimed_by != claimed_by and j.claimed_by.startswith(name + "/")
            and "/" not in j.claimed_by[len(name) + 1:]
        ]
        results = [self._recover(j, now, Recovery.WORKER_RESTARTED) for j in mine]
        self._wake(results, now)
        return results

    def _wake(self, results: Sequence[Recovered], now: dt.datetime) -> None:
        self._announce([self._jobs[r.id] for r in results], now)
        dead = [r.id for r in results if r.status is Status.DEAD]
        self._announce_finished(dead)
        follower = self._follower()
        for id in dead:
            follower.finished(id, True, now)
        self._followed(follower)

