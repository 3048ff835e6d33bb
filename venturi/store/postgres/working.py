"""Working: claiming, settling, renewing leases, recovering claims, next-visible probes.

These are the worker's statements, each one round trip for a whole batch.
Settling and recovery follow venturi.store.lifecycle, which the SQL of
``settle.sql`` and ``recover.sql`` mirrors.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from uuid import UUID

from ..base import (
    Action,
    ClaimRequest,
    JobRecord,
    LeaseRenewal,
    Outcome,
    Recovered,
    Settled,
    Settlement,
    Status,
)
from ..lifecycle import Recovery
from ..memory_dependencies import WAITING
from . import rows
from .operations import Operations

_COMPLETED = (Status.COMPLETED, Outcome.COMPLETED)


class Working(Operations):
    async def claim(self, request: ClaimRequest) -> list[JobRecord]:
        if request.limit <= 0 or not request.leases:
            return []
        kinds = list(request.leases)
        low, normal = request.reservations()
        # A worker claims again as soon as slots free up: like an insert, a claim keeps
        # its connection for the next one.
        found = await self._fetch(
            "claim", kinds, [request.leases[k] for k in kinds], request.limit, normal, low,
            request.claimed_by, keep=True,
        )
        return [rows.job(r) for r in found]

    async def runnable_left(self, kinds: Sequence[str]) -> bool:
        return bool(await self._val("runnable_left", list(kinds))) if kinds else False

    async def prepare_claims(self, request: ClaimRequest) -> None:
        """The claim statement with a limit of 0 (it updates no row): the first call opens
        a plan-caching session and makes the claim's plan on it, 15-20 ms on a new
        connection (benchmarks/results-throughput.md, "Boot: the claim session")."""
        kinds = list(request.leases)
        if kinds:
            await self._fetch("claim", kinds, [request.leases[k] for k in kinds], 0, 0, 0,
                              request.claimed_by, keep=True)

    async def settle_many(
        self, claimed_by: str, settlements: Sequence[Settlement]
    ) -> list[Settled]:
        if not settlements:
            return []
        # One UPDATE touches a row once, whatever the number of input rows that
        # match it: send each (id, run_no) once, so a repeat reports not applied.
        first: dict[tuple[UUID, int], int] = {}
        for index, x in enumerate(settlements):
            first.setdefault((x.id, x.run_no), index)
        s = [settlements[i] for i in sorted(first.values())]
        applied: dict[tuple[UUID, int], tuple[Status, Outcome]] = {}
        if all(x.action is Action.COMPLETE and x.successor is None and not x.set_carry
               for x in s):
            for keyed in rows.by_id(s):
                done = await self._fetch("settle_completions", claimed_by, list(keyed), rows.encode(
                    {str(k): (x.run_no, x.note, x.attachment, x.result) for k, x in keyed.items()}))
                applied.update(((r[0], r[1]), _COMPLETED) for r in done)
        else:
            for keyed in rows.by_id(s):
                found = await self._fetch("settle_many", claimed_by, list(keyed), rows.encode({
                    str(k): (x.run_no, x.action.value, x.note, x.attachment, rows.micros(x.delay),
                             x.set_carry, x.carry,
                             str(x.successor[0]) if x.successor else None,
                             x.successor[1].isoformat() if x.successor else None,
                             x.successor_trace, x.result)
                    for k, x in keyed.items()}))
                applied.update(((r[0], r[5]), (rows.STATUS[r[1]], rows.OUTCOME[r[2]]))
                               for r in found)
        out = []
        for index, x in enumerate(settlements):
            hit = applied.get((x.id, x.run_no)) if first[x.id, x.run_no] == index else None
            out.append(Settled(x.id, hit is not None, *(hit or (None, None))))
        return out

    async def extend_leases(
        self, claimed_by: str, renewals: Sequence[LeaseRenewal]
    ) -> set[UUID]:
        if not renewals:
            return set()
        # The last renewal of a claim wins, as if they were applied in order.
        latest = list({(r.id, r.run_no): r for r in renewals}.values())
        kept: set[UUID] = set()
        for keyed in rows.by_id(latest):
            found = await self._fetch("extend_leases", claimed_by, list(keyed), rows.encode(
                {str(k): (r.run_no, rows.micros(r.lease)) for k, r in keyed.items()}))
            kept.update(r[0] for r in found)
        return kept

    async def find_stale(self, limit: int = 1000) -> list[JobRecord]:
        return [rows.job(r) for r in await self._fetch("find_stale", limit)]

    async def recover(self, id: UUID, run_no: int) -> Recovered | None:
        row = await self._row("recover", Recovery.LEASE_EXPIRED.value, id, run_no)
        return None if row is None else rows.recovered(row)

    async def recover_stale(self, limit: int = 1000) -> list[Recovered]:
        found = await self._fetch("recover_stale", Recovery.LEASE_EXPIRED.value, limit)
        return [rows.recovered(r) for r in found]

    async def recover_boot(self, name: str, claimed_by: str) -> list[Recovered]:
        found = await self._fetch("recover_boot", Recovery.WORKER_RESTARTED.value, name,
                                  claimed_by)
        return [rows.recovered(r) for r in found]

    async def next_visible_at(self, kinds: Sequence[str]) -> dt.datetime | None:
        result: dt.datetime | None = await self._val("next_visible_at", list(kinds))
        # A job waiting for its dependencies is due at WAITING: when they finish, the
        # statement that finishes them wakes the workers.
        return None if result is None or result >= WAITING else result
