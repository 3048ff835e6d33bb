"""The queue's own vacuum as a worker service (``--maintenance on``, the default):
every ``policy.interval``, the first one after the worker starts, it looks at the jobs
and journal tables and vacuums those
whose dead row versions piled up where autovacuum is off or has not come
(docs/operations/maintenance.md). One worker of a queue does it at a time (the store's
try-lock), on a session of its own, never inside a transaction; a table is vacuumed at
most once per ``policy.min_gap``, whichever worker looks.

A VACUUM that fails (cancelled by an operator, a lock timeout) is logged and tried
again at the next look: the tables' health is not a reason to stop running jobs.
"""

from __future__ import annotations

import anyio

from ..errors import DatabaseError, DatabaseUnavailable, classify
from ..logs import get_logger
from ..store.base import Maintenance, Store
from ..store.vacuum import MaintenanceState, VacuumPolicy, VacuumRun
from .health import DatabaseHealth

log = get_logger("venturi.worker")


class Vacuum:
    def __init__(self, store: Store, policy: VacuumPolicy, db: DatabaseHealth) -> None:
        self._store = store
        self._policy = policy
        self._db = db
        self._state = MaintenanceState()
        self.runs: list[VacuumRun] = []  # what it did, newest last (bounded), for tests

    async def _look(self, session: Maintenance) -> None:
        try:
            done = await session.vacuum(self._policy, self._state)
        except DatabaseUnavailable:
            raise
        except DatabaseError as exc:
            log.warning("vacuum_failed", error=classify(exc), sqlstate=exc.sqlstate)
            return
        for run in done:
            self._report(run)
        self.runs = [*self.runs, *done][-100:]

    @staticmethod
    def _report(run: VacuumRun) -> None:
        if run.skipped is None and run.horizon is not None:
            # Too little was removable: someone's snapshot holds the horizon back.
            log.warning("vacuum_held_back", table=run.table, dead_before=run.dead_before,
                        dead_after=run.dead_after, seconds=round(run.seconds, 3),
                        horizon=run.horizon)
        elif run.skipped is None:
            log.info("table_vacuumed", table=run.table, reason=run.reason,
                     dead_before=run.dead_before, dead_after=run.dead_after,
                     seconds=round(run.seconds, 3), analyzed=run.analyzed)
        elif run.skipped == "horizon-held":
            log.debug("vacuum_skipped", table=run.table, skipped=run.skipped,
                      horizon=run.horizon)
        else:
            log.info("vacuum_skipped", table=run.table, skipped=run.skipped,
                     dead=run.dead_before)

    async def run(self) -> None:
        session = self._store.maintenance()
        if session is None:
            return  # this store has nothing to vacuum
        async with session:
            while True:
                # The first look too comes one interval after the start: a booting worker
                # has its claims to make, and workers started together would each open a
                # session and read the tables' statistics at once (eight at 20,000 jobs:
                # benchmarks/results-throughput.md, "The boot's vacuum look").
                await anyio.sleep(self._policy.interval.total_seconds())
                await self._db.retry("vacuum", lambda: self._look(session))
