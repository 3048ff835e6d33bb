"""Putting back claims whose worker is gone: at boot, and by the reaper.

Crash recovery is timeout-only (docs/concepts/leases.md): a claim whose lease expired
is re-pended by the reaper of any worker, at boot and then every half of the shortest
lease it serves; a restarted worker that holds its name's lock recovers the claims of
its earlier boots at once ("Restarts: boot recovery"). Either counts as a failure of
the job (journal ``stale-recovered``, or ``dead`` when the budget is spent;
docs/concepts/failures.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import anyio

from ..logs import get_logger
from ..store.base import Recovered, Store
from .health import DatabaseHealth
from .identity import Identity

log = get_logger("venturi.worker")

SWEEP_LIMIT = 1000  # claims recovered per statement; a full sweep goes again at once


def log_recovered(recovered: Sequence[Recovered], reason: str) -> None:
    for r in recovered:
        log.warning("job_recovered", job_id=str(r.id), kind=r.kind, run_no=r.run_no,
                    status=r.status.value, previous_owner=r.claimed_by, reason=reason)


async def recover_earlier_boots(store: Store, identity: Identity) -> list[Recovered]:
    """Re-pend the claims of this name's earlier boots. Only while holding the name's
    lock: it proves that no live process made them."""
    recovered = await store.recover_boot(identity.name, identity.claimed_by)
    log_recovered(recovered, "worker-restarted")
    return recovered


class Reaper:
    """Recovers expired claims of any worker, then sets ``claim_wanted``: the recovered
    jobs are runnable now. ``flushed`` writes this worker's buffered settlements first
    after an outage."""

    def __init__(self, store: Store, db: DatabaseHealth, flushed: Callable[[], Awaitable[None]],
                 claim_wanted: asyncio.Event, shortest_lease: float) -> None:
        self._store = store
        self._db = db
        self._flushed = flushed
        self._claim_wanted = claim_wanted
        self.period = max(shortest_lease / 2, 0.2)

    async def _sweep(self) -> list[Recovered]:
        await self._flushed()
        return await self._store.recover_stale(SWEEP_LIMIT)

    async def run(self) -> None:
        while True:
            recovered = await self._db.retry("reaper", self._sweep)
            log_recovered(recovered, "lease-expired")
            if recovered:
                self._claim_wanted.set()
                if len(recovered) == SWEEP_LIMIT:
                    continue
            await anyio.sleep(self.period)
