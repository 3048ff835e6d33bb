"""Lease renewal: one statement for all of a worker's claims, about every third of the
shortest lease it holds (docs/concepts/leases.md).

A renewal that keeps a claim moves that run's local deadline to its send time plus two
thirds of the lease; one that finds the claim gone stops the run, which then settles
nothing (the claim was recovered or the job cancelled).

A renewal and a settle lock the same rows: they take turns on the settler's ``writes``
lock (venturi/worker/settler.py). A renewal that loses a race to another session all the
same (a deadlock with an operator's statement) is tried again shortly, not after a third
of a lease: the runs' deadlines are two thirds of a lease from the last renewal.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

import anyio

from ..errors import CONFLICT_PAUSE, DatabaseConflict, DatabaseUnavailable, classify
from ..logs import get_logger
from ..store.base import LeaseRenewal, Store
from .health import DatabaseHealth
from .held import Held, HeldJobs, HeldState, StopReason
from .identity import Identity

log = get_logger("venturi.worker")


class Renewer:
    def __init__(self, store: Store, identity: Identity, held: HeldJobs, db: DatabaseHealth,
                 shortest_lease: float, writes: asyncio.Lock | None = None) -> None:
        self._store = store
        self._identity = identity
        self._held = held
        self._db = db
        self._shortest = shortest_lease  # of the kinds served: the period while none is held
        self._writes = writes or asyncio.Lock()

    async def run(self) -> None:
        held_jobs = self._held
        lost_race = False
        while True:
            leases = [h.lease.total_seconds() for h in held_jobs.by_id.values()]
            await anyio.sleep(CONFLICT_PAUSE if lost_race
                              else max(min(leases, default=self._shortest) / 3, 0.05))
            lost_race = False
            held: list[Held] = []
            kept: set[UUID] | None = None
            try:
                async with self._writes:  # never while the settler writes
                    held = list(held_jobs.by_id.values())
                    if not held:
                        continue
                    sent = anyio.current_time()
                    kept = await self._store.extend_leases(self._identity.claimed_by, [
                        LeaseRenewal(h.id, h.run_no, h.lease) for h in held])
            except DatabaseUnavailable:
                # Not retried as is: the next try re-reads the claims and its send time.
                await self._db.back_off("renewer")
                continue
            except DatabaseConflict as exc:
                # Rolled back whole: nothing was renewed, and nothing is known lost.
                log.warning("renewal_conflict", count=len(held), error=classify(exc))
                lost_race = True
                continue
            self._db.recovered("renewer")
            for h in held:
                if h.id in kept:
                    h.set_deadline(sent + h.lease.total_seconds() * 2 / 3)
                elif held_jobs.holds(h) and h.state is not HeldState.SETTLING:
                    h.stop(StopReason.LEASE_LOST)
                    if h.state is HeldState.BUFFERED:
                        held_jobs.abandon(h)
