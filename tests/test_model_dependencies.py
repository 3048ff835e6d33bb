"""Model-based test of dependencies: random DAGs, random outcomes, both stores side by side.

A hypothesis state machine enqueues jobs after random earlier ones (some with
``after_failure="run"``, some as whole workflows), claims and settles them with random
outcomes (complete, fail, kill), cancels and redrives them, on MemoryStore and
PostgresStore under one clock. After every step the stores must agree, and:

- a job is only ever claimed once every dependency completed (or, with
  ``after_failure="run"``, finished or went away);
- a waiting job's count is exactly its dependencies still pending or claimed, and a
  job with none left is visible: nothing waits forever;
- every dependent of a failed step fails once (one ``dependency-failed`` entry per
  failure, never two without a redrive between);
- journals stay hole-free (runs 1..n).

``HYPOTHESIS_PROFILE=long`` runs a longer hunt, as for tests/test_model.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import orjson
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.helpers import migrated_prefix
from venturi import ManualClock, MemoryStore, Outcome, Status
from venturi.store.base import Action, ClaimRequest, HistoryFilter, JobRecord, NewJob, Settlement
from venturi.store.memory_dependencies import WAITING
from venturi.store.postgres import PostgresStore

# No shrinking in CI: a failure prints its steps as found (shrinking a state machine on
# two stores can take minutes); the long profile shrinks.
settings.register_profile(
    "deps-ci", max_examples=30, stateful_step_count=25, deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "deps-long", max_examples=1000, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PROFILE = "deps-long" if os.environ.get("HYPOTHESIS_PROFILE") == "long" else "deps-ci"
START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
LEASE = {"k": dt.timedelta(seconds=30)}
FAILED = "dependency-failed"


class DependenciesMachine(RuleBasedStateMachine):
    dsn: str
    prefix: str

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.clock = ManualClock(START)
        self.mem = MemoryStore(clock=self.clock)
        self.pg = self.runner.run(self._open_pg())
        self.next_id = 0
        self.parents: dict[UUID, tuple[UUID, ...]] = {}
        self.run_on_failure: dict[UUID, bool] = {}
        self.completed: set[UUID] = set()  # jobs that completed (and may be gone since)

    async def _open_pg(self) -> PostgresStore:
        pg = await PostgresStore.connect(self.dsn, prefix=self.prefix, min_size=1, max_size=2,
                                         clock=self.clock)
        # Every job waiting for two or more counts them through shards (below it, on
        # its own row): both ways, on graphs this small (sql/0008_workflows_fanin.sql).
        pg.fanin_shard_at = 2
        async with pg.pool.acquire() as c:
            await c.execute(f"TRUNCATE {self.prefix}journal, {self.prefix}jobs, "
                            f"{self.prefix}dependencies, {self.prefix}dependency_shards, "
                            f"{self.prefix}workflows")
        return pg

    def teardown(self) -> None:
        try:
            self.runner.run(self.pg.close())
        finally:
            self.runner.close()

    def both(self, op: Any) -> Any:
        mem = self.runner.run(op(self.mem))
        pg = self.runner.run(op(self.pg))
        assert mem == pg, f"memory {mem!r} != postgres {pg!r}"
        return mem

    def _new_id(self) -> UUID:
        self.next_id += 1
        return UUID(int=(0x1234 << 96) | self.next_id)

    def _job(self, after: tuple[UUID, ...], run: bool, max_failures: int) -> NewJob:
        job = NewJob(id=self._new_id(), kind="k", payload=orjson.dumps({}).decode(),
                     max_failures=max_failures, after=after, run_on_failure=run)
        self.parents[job.id] = after
        self.run_on_failure[job.id] = run
        return job

    # --- rules --------------------------------------------------------------------------

    @rule(data=st.data(), n=st.integers(1, 4))
    def enqueue(self, data: st.DataObject, n: int) -> None:
        """A batch of jobs, each after some earlier jobs (or a job that never existed),
        or of this batch (a workflow's shape)."""
        known = list(self.parents)
        jobs: list[NewJob] = []
        for _ in range(n):
            pool = known + [j.id for j in jobs]
            picks = data.draw(st.lists(st.sampled_from(pool), max_size=3, unique=True)
                              if pool else st.just([]))
            if data.draw(st.integers(0, 9)) == 0:
                picks.append(UUID(int=(0x9999 << 96) | self.next_id))  # gone before
            jobs.append(self._job(tuple(picks), data.draw(st.booleans()),
                                  data.draw(st.integers(1, 2))))
        self.both(lambda store: store.enqueue(jobs))

    @rule(data=st.data())
    def claim_and_settle(self, data: st.DataObject) -> None:
        limit = data.draw(st.integers(1, 4))
        async def claim(store: Any) -> list[JobRecord]:
            found = await store.claim(ClaimRequest("w/1", LEASE, limit))
            return sorted(found, key=lambda j: j.id)  # RETURNING has no order
        claimed = self.both(claim)
        self._check_claimable(claimed)
        settlements = []
        for job in claimed:
            action = data.draw(st.sampled_from([Action.COMPLETE, Action.COMPLETE,
                                                Action.FAIL, Action.KILL]))
            settlements.append(Settlement(job.id, job.run_count, action, note="x",
                                          result=orjson.dumps(job.run_count).decode()))
        self.both(lambda store: store.settle_many("w/1", settlements))
        self.completed.update(id for id, job in self._jobs().items()
                              if job.status is Status.COMPLETED)
        self.clock.advance(1)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if not self.parents:
            return
        id = data.draw(st.sampled_from(list(self.parents)))
        self.both(lambda store: store.cancel(ids=[id]))

    @rule(data=st.data())
    def redrive(self, data: st.DataObject) -> None:
        jobs = self.runner.run(self.mem.query_jobs(HistoryFilter(status=Status.DEAD,
                                                                   limit=1000)))
        # Redriving a job that died of a dependency is an operator's override (it runs
        # at once): the model redrives the failed steps themselves.
        own = [j.id for j in jobs
               if self.runner.run(self.mem.journal(j.id))[-1].note != FAILED]
        if own:
            id = data.draw(st.sampled_from(own))
            self.both(lambda store: store.retry(ids=[id]))

    @rule()
    def time_passes(self) -> None:
        self.clock.advance(5)
        # Jobs whose backoff ends become claimable; their waiting dependents stay.

    # --- invariants -------------------------------------------------------------------------

    def _jobs(self) -> dict[UUID, JobRecord]:
        return {j.id: j for j in self.runner.run(self.mem.query_jobs(HistoryFilter(limit=10**6)))}

    def _check_claimable(self, claimed: list[JobRecord]) -> None:
        jobs = self._jobs()
        for job in claimed:
            own = self.runner.run(self.mem.journal(job.id))
            if any(e.outcome is Outcome.REDRIVEN for e in own):
                continue  # redriven: it waits only for what was unfinished then
            for parent in self.parents.get(job.id, ()):
                p = jobs.get(parent)
                if self.run_on_failure[job.id]:
                    assert p is None or p.status in (Status.COMPLETED, Status.DEAD), (
                        f"{job.id} ran before its dependency {parent} finished")
                else:  # completed, and maybe cancelled (deleted) since
                    assert (p is None and parent in self.completed) or (
                        p is not None and p.status is Status.COMPLETED), (
                        f"{job.id} ran before its dependency {parent} completed")

    async def _snapshot(self, store: Any) -> dict[UUID, tuple[Any, ...]]:
        out = {}
        for job in await store.query_jobs(HistoryFilter(limit=10**6)):
            entries = [(e.run_no, e.outcome, e.note) for e in await store.journal(job.id)]
            out[job.id] = (job, entries)
        return out

    @invariant()
    def stores_agree_and_nothing_waits_forever(self) -> None:
        mem = self.runner.run(self._snapshot(self.mem))
        pg = self.runner.run(self._snapshot(self.pg))
        assert mem == pg
        jobs = self._jobs()
        for id, job in jobs.items():
            entries = mem[id][1]
            runs = [r for r, outcome, note in entries
                    if outcome.is_execution and not (outcome is Outcome.DEAD and note == FAILED)]
            settled = job.run_count - (1 if job.status is Status.CLAIMED else 0)
            assert runs == list(range(1, settled + 1)), f"journal runs of {id}: {runs}"
            failed_in_a_row = 0
            for _, outcome, note in entries:
                if outcome is Outcome.REDRIVEN:
                    failed_in_a_row = 0
                elif note == FAILED:
                    failed_in_a_row += 1
                    assert failed_in_a_row == 1, f"{id} failed twice of its dependencies"
            if job.status is Status.PENDING and id in self.parents:
                alive = sum(1 for p in self.parents[id]
                            if (pj := jobs.get(p)) is not None
                            and pj.status in (Status.PENDING, Status.CLAIMED))
                assert (job.visible_at >= WAITING) == (job.waiting > 0), f"{id} visibility"
                assert job.waiting == alive, f"{id} waits for {job.waiting}, {alive} unfinished"
                if not self.run_on_failure[id]:
                    for p in self.parents[id]:
                        pj = jobs.get(p)
                        assert (pj is None and p in self.completed) or (
                            pj is not None and pj.status is not Status.DEAD), (
                            f"{id} waits for a failed job {p}")


@pytest.fixture(scope="module")
def deps_prefix(pg_dsn: str) -> Iterator[str]:
    with migrated_prefix(pg_dsn) as prefix:
        yield prefix


@pytest.mark.timeout(1800)
def test_dependencies_model_on_both_stores(pg_dsn: str, deps_prefix: str) -> None:
    machine = type("Machine", (DependenciesMachine,), {"dsn": pg_dsn, "prefix": deps_prefix})
    run_state_machine_as_test(machine, settings=settings.get_profile(PROFILE))
