"""Model-based test: MemoryStore and PostgresStore side by side under one clock.

A hypothesis state machine drives random sequences of enqueue (dedup merges,
delays, priorities, subjects), claim, settle (every action, stale epochs and
wrong owners), lease renewal, recovery (reaper, guarded, boot), cancel, retry,
cleanup and clock advances against both stores. After every step both must
hold the same jobs in the same states with the same journals (modulo journal
ids), and DESIGN §4's invariants must hold. A small oracle of the claims
currently held says which settlements and renewals must apply.

The default profile is sized for CI (well under a minute). For a longer hunt::

    HYPOTHESIS_PROFILE=long .venv/bin/pytest tests/test_model.py -p no:timeout

The PostgreSQL tables use one prefix per test run and are truncated at the
start of every example (a fresh, migrated prefix per example is too slow).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import os
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.helpers import migrated_prefix
from venturi import ManualClock, MemoryStore, Outcome, Status
from venturi.store.base import (
    Action,
    ClaimRequest,
    CleanupCriteria,
    CountFilter,
    HistoryFilter,
    JobRecord,
    LeaseRenewal,
    MergeUpdate,
    NewJob,
    Settlement,
    Store,
)
from venturi.store.postgres import PostgresStore

settings.register_profile(
    "model-ci", max_examples=40, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "long", max_examples=2000, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "model-ci")
if PROFILE not in ("model-ci", "long"):
    PROFILE = "model-ci"

KINDS = ("a", "b")
WORKERS = ("w/1", "w/2")  # one worker name, two boots: recover_boot has work to do
DEDUP_KEYS = (None, None, "k1", "k2")
SUBJECTS = (None, "s/a", "s/a/b", "s/ab", "s%/x", "s_", "s\\q", "s'q")
SUBJECT_ROOTS = ("s/a", "s%", "s_", "s", "s\\q", "s'q", "s/a/b")
NOTES = (None, "ValueError", "lease", "done")
START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)

job_specs = st.fixed_dictionaries({
    "kind": st.sampled_from(KINDS),
    "priority": st.integers(0, 2),
    "max_failures": st.integers(1, 3),
    "delay_ms": st.sampled_from([0, 0, 0, 500, 3000, 15000]),
    "at_s": st.sampled_from([None, None, None, -5, 0, 3, 20]),
    "dedup_key": st.sampled_from(DEDUP_KEYS),
    "subject": st.sampled_from(SUBJECTS),
    "merge": st.sampled_from(["keep", "replace", "beside"]),
})


def _merge(new: NewJob, pending: JobRecord) -> MergeUpdate | None:
    """A merge policy that depends only on the new job, so both stores decide alike."""
    policy = orjson.loads(new.payload)["merge"]
    if policy == "keep":
        return MergeUpdate()
    if policy == "replace":
        return MergeUpdate(payload=new.payload, priority=new.priority, set_carry=True, carry=None)
    return None


def _job_key(job: JobRecord) -> dict[str, Any]:
    return dataclasses.asdict(job)


class StoresMachine(RuleBasedStateMachine):
    dsn: str
    prefix: str

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.clock = ManualClock(START)
        self.mem = MemoryStore(clock=self.clock)
        self.pg = self.run(self._open_pg())
        self.next_id = 0
        self.known: list[UUID] = []
        # The oracle: which (run_no, worker) holds each claimed job right now.
        self.held: dict[UUID, tuple[int, str]] = {}
        self.seen_claims: list[tuple[UUID, int, str]] = []
        self.applied: set[tuple[UUID, int]] = set()

    def run(self, coro: Any) -> Any:
        return self.runner.run(coro)

    async def _open_pg(self) -> PostgresStore:
        pg = await PostgresStore.connect(self.dsn, prefix=self.prefix, min_size=1, max_size=2,
                                         clock=self.clock)
        async with pg.pool.acquire() as c:
            await c.execute(f"TRUNCATE {self.prefix}journal, {self.prefix}jobs")
        return pg

    def teardown(self) -> None:
        try:
            self.run(self.pg.close())
        finally:
            self.runner.close()

    # --- both stores -------------------------------------------------------------------

    def both(self, op: Any) -> Any:
        """Run ``op(store)`` on both stores; their answers must agree."""
        mem_result = self.run(op(self.mem))
        pg_result = self.run(op(self.pg))
        assert mem_result == pg_result, f"memory {mem_result!r} != postgres {pg_result!r}"
        return mem_result

    def _new_id(self) -> UUID:
        self.next_id += 1
        return UUID(int=(0x1234 << 96) | self.next_id)

    def _claims(self, data: st.DataObject) -> list[tuple[UUID, int, str]]:
        """Mostly claims held now (they can settle); sometimes any claim ever seen."""
        held = [(id, run_no, owner) for id, (run_no, owner) in self.held.items()]
        return held if held and data.draw(st.integers(0, 3)) else self.seen_claims

    def _pick(self, data: st.DataObject, pool: list[Any]) -> Any:
        return pool[data.draw(st.integers(0, len(pool) - 1))] if pool else None

    # --- producing ---------------------------------------------------------------------

    @initialize(specs=st.lists(job_specs, min_size=2, max_size=6))
    def seed(self, specs: list[dict[str, Any]]) -> None:
        self.enqueue(specs)

    @rule(specs=st.lists(job_specs, min_size=1, max_size=3))
    def enqueue(self, specs: list[dict[str, Any]]) -> None:
        now = self.clock.now()
        jobs = []
        for n, s in enumerate(specs):
            jobs.append(NewJob(
                id=self._new_id(), kind=s["kind"],
                payload=orjson.dumps({"n": self.next_id * 10 + n, "merge": s["merge"]}).decode(),
                priority=s["priority"], max_failures=s["max_failures"],
                delay=dt.timedelta(milliseconds=s["delay_ms"]),
                at=None if s["at_s"] is None else now + dt.timedelta(seconds=s["at_s"]),
                dedup_key=s["dedup_key"], subject=s["subject"],
            ))
        results = self.both(lambda store: store.enqueue(jobs, merge=_merge))
        for job, result in zip(jobs, results, strict=True):
            if not result.merged:
                assert result.id == job.id
                self.known.append(job.id)

    # --- working -----------------------------------------------------------------------

    # Rules take one argument each: hypothesis orders rules by argument count,
    # and its choice of rule leans towards the front of that order.
    claim_requests = st.fixed_dictionaries(dict(
        worker=st.sampled_from(WORKERS),
        kinds=st.sampled_from([KINDS, KINDS, KINDS[:1], KINDS[1:]]),
        limit=st.sampled_from([1, 2, 3, 4, 0]), reserve_normal=st.integers(0, 2),
        reserve_low=st.integers(0, 2), lease_s=st.integers(1, 30),
    ))

    def _claim(self, worker: str, kinds: tuple[str, ...], limit: int, reserve_normal: int,
               reserve_low: int, lease_s: int) -> list[tuple[UUID, int, str]]:
        request = ClaimRequest(
            worker, {k: dt.timedelta(seconds=lease_s) for k in kinds}, limit,
            reserve_normal=reserve_normal, reserve_low=reserve_low,
        )

        async def claim(store: Store) -> list[dict[str, Any]]:
            return sorted((_job_key(j) for j in await store.claim(request)),
                          key=lambda j: j["id"])

        claimed = self.both(claim)
        assert len(claimed) <= limit, f"claimed {len(claimed)} jobs with limit {limit}"
        out = []
        for j in claimed:
            assert j["id"] not in self.held, "a job was claimed twice at once"
            assert j["status"] is Status.CLAIMED and j["claimed_by"] == worker
            self.held[j["id"]] = (j["run_count"], worker)
            out.append((j["id"], j["run_count"], worker))
        self.seen_claims.extend(out)
        return out

    def _settlement(self, data: st.DataObject, id: UUID, run_no: int) -> Settlement:
        return Settlement(
            id=id, run_no=run_no, action=data.draw(st.sampled_from(list(Action))),
            note=data.draw(st.sampled_from(NOTES)),
            attachment=data.draw(st.sampled_from([None, '{"chunks": 3}'])),
            delay=dt.timedelta(milliseconds=data.draw(st.sampled_from([0, 1000, 7000]))),
            set_carry=data.draw(st.booleans()),
            carry=data.draw(st.sampled_from([None, '{"page": 2}', "[1, 2]"])),
        )

    def _settle(self, worker: str, settlements: list[Settlement]) -> None:
        expected = []
        held = dict(self.held)
        for s in settlements:
            hit = held.get(s.id) == (s.run_no, worker)
            expected.append(hit)
            if hit:
                del held[s.id]
        results = self.both(lambda store: store.settle_many(worker, settlements))
        assert [r.applied for r in results] == expected, (
            f"settle guard: applied {[r.applied for r in results]}, expected {expected}")
        for s, r in zip(settlements, results, strict=True):
            if r.applied:
                assert (s.id, s.run_no) not in self.applied, "settled twice at one epoch"
                self.applied.add((s.id, s.run_no))
                del self.held[s.id]

    @rule(request=claim_requests)
    def claim(self, request: dict[str, Any]) -> None:
        self._claim(**request)

    @rule(data=st.data())
    def claim_and_settle(self, data: st.DataObject) -> None:
        """A worker's round: claim, then settle what it got (sometimes twice over)."""
        args = data.draw(self.claim_requests)
        claimed = self._claim(**args)
        settlements = [self._settlement(data, id, run_no) for id, run_no, _ in claimed]
        if settlements and data.draw(st.booleans()):
            settlements.append(settlements[0])
        self._settle(args["worker"], settlements)

    @rule(data=st.data())
    @precondition(lambda self: bool(self.seen_claims))
    def settle(self, data: st.DataObject) -> None:
        """Settlements of held and stale claims, with off-by-one epochs."""
        worker = data.draw(st.sampled_from(WORKERS))
        n = data.draw(st.integers(1, 3))
        settlements = []
        for _ in range(n):
            id, run_no, _owner = self._pick(data, self._claims(data))
            run_no += data.draw(st.sampled_from([0, 0, 0, -1, 1]))
            settlements.append(self._settlement(data, id, run_no))
        self._settle(worker, settlements)

    @rule(data=st.data())
    @precondition(lambda self: bool(self.seen_claims))
    def extend_leases(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(WORKERS))
        n = data.draw(st.integers(1, 3))
        renewals = []
        for _ in range(n):
            id, run_no, _owner = self._pick(data, self._claims(data))
            lease_s = data.draw(st.integers(1, 30))
            renewals.append(LeaseRenewal(id, run_no, dt.timedelta(seconds=lease_s)))
        held = self.both(lambda store: store.extend_leases(worker, renewals))
        assert held == {r.id for r in renewals if self.held.get(r.id) == (r.run_no, worker)}

    @rule(limit=st.integers(1, 3))
    def recover_stale(self, limit: int) -> None:
        async def recover(store: Store) -> list[Any]:
            return sorted(await store.recover_stale(limit), key=lambda r: r.id)

        for r in self.both(recover):
            assert self.held.pop(r.id) == (r.run_no, r.claimed_by)

    @rule(data=st.data())
    @precondition(lambda self: bool(self.seen_claims))
    def recover_one(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from([0, 0, -1, 1]))
        stale = self.both(lambda store: store.find_stale(5))
        targets = [(j.id, j.run_count) for j in stale] + [c[:2] for c in self.seen_claims]
        if not targets:
            return
        id, run_no = self._pick(data, targets)
        result = self.both(lambda store: store.recover(id, run_no + offset))
        if result is not None:
            assert self.held.pop(result.id) == (result.run_no, result.claimed_by)

    @rule(worker=st.sampled_from(WORKERS))
    def recover_boot(self, worker: str) -> None:
        async def recover(store: Store) -> list[Any]:
            return sorted(await store.recover_boot("w", worker), key=lambda r: r.id)

        for r in self.both(recover):
            assert r.claimed_by != worker
            assert self.held.pop(r.id) == (r.run_no, r.claimed_by)

    # --- administering -------------------------------------------------------------------

    @rule(data=st.data())
    def cancel_ids(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, 3))
        unknown = data.draw(st.booleans())
        ids = [self._pick(data, self.known) for _ in range(n) if self.known]
        if unknown:
            ids.append(UUID(int=0xDEAD))
        self.both(lambda store: store.cancel(ids=ids))
        for id in ids:
            self.held.pop(id, None)

    @rule(root=st.sampled_from(SUBJECT_ROOTS))
    def cancel_subject(self, root: str) -> None:
        self.both(lambda store: store.cancel(subject=root))
        self._forget_deleted()

    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from((None, *KINDS)))
        if data.draw(st.booleans()):
            self.both(lambda store: store.retry(kind=kind))
        else:
            ids = [self._pick(data, self.known) for _ in range(2) if self.known]
            self.both(lambda store: store.retry(ids=ids))

    @rule(offset_s=st.integers(-10, 10), kind=st.sampled_from((None, *KINDS)),
          status=st.sampled_from((None, Status.COMPLETED, Status.DEAD)),
          batch=st.integers(1, 3))
    def cleanup(self, offset_s: int, kind: str | None, status: Status | None,
                batch: int) -> None:
        criteria = CleanupCriteria(self.clock.now() + dt.timedelta(seconds=offset_s),
                                   kind=kind, status=status, batch_size=batch)
        self.both(lambda store: store.cleanup(criteria))

    @rule(ms=st.sampled_from([1, 500, 1000, 5000, 10_000, 20_000, 31_000]))
    def advance(self, ms: int) -> None:
        self.clock.advance(dt.timedelta(milliseconds=ms))

    # --- reading -------------------------------------------------------------------------

    @rule(kind=st.sampled_from((None, *KINDS)), root=st.sampled_from((None, *SUBJECT_ROOTS)),
          status=st.sampled_from((None, *Status)), limit=st.integers(1, 5))
    def inspect(self, kind: str | None, root: str | None, status: Status | None,
                limit: int) -> None:
        self.both(lambda store: store.stats())
        self.both(lambda store: store.detail(limit))
        self.both(lambda store: store.next_visible_at(list(KINDS) if kind is None else [kind]))
        statuses = None if status is None else (status,)
        self.both(lambda store: store.count(CountFilter(kind, root, statuses)))
        self.both(lambda store: store.query_jobs(HistoryFilter(kind=kind, status=status,
                                                                limit=limit)))
        for key in ("k1", "k2"):
            self.both(lambda store, key=key: store.dedup_candidate(kind or "a", key))

    # --- invariants ------------------------------------------------------------------------

    def _forget_deleted(self) -> None:
        alive = {j.id for j in self.run(self.mem.query_jobs(HistoryFilter(limit=10**6)))}
        for id in list(self.held):
            if id not in alive:
                del self.held[id]

    async def _pg_journals(self) -> dict[UUID, list[tuple[Any, ...]]]:
        async with self.pg.pool.acquire() as c:
            rows = await c.fetch(
                f"SELECT job_id, kind, run_no, recorded_at, outcome, note, attachment::text"
                f" FROM {self.prefix}journal ORDER BY id")
        out: dict[UUID, list[tuple[Any, ...]]] = {}
        for r in rows:
            attachment = None if r[6] is None else orjson.loads(r[6])
            out.setdefault(r[0], []).append(
                (r[0], r[1], r[2], r[3], Outcome(r[4]), r[5], attachment))
        return out

    async def _snapshots(self) -> tuple[Any, ...]:
        everything = HistoryFilter(limit=10**6)
        mem_jobs = {j.id: j for j in await self.mem.query_jobs(everything)}
        mem_journals = {
            id: [(e.job_id, e.kind, e.run_no, e.recorded_at, e.outcome, e.note, e.attachment)
                 for e in await self.mem.journal(id)]
            for id in mem_jobs
        }
        pg_rows, pg_journals = await asyncio.gather(
            self.pg.query_jobs(everything), self._pg_journals())
        return mem_jobs, mem_journals, {j.id: j for j in pg_rows}, pg_journals

    @invariant()
    def stores_agree_and_invariants_hold(self) -> None:
        mem_jobs, mem_journals, pg_jobs, pg_journals = self.run(self._snapshots())
        assert mem_jobs.keys() == pg_jobs.keys(), "the stores hold different jobs"
        assert pg_journals.keys() <= mem_jobs.keys(), "journal entries of a deleted job"
        for id, job in mem_jobs.items():
            assert _job_key(job) == _job_key(pg_jobs[id]), f"job {id} differs"
            entries = mem_journals[id]
            assert entries == pg_journals.get(id, []), f"journal of {id} differs"
            _check_job(job, entries)
            assert (id in self.held) == (job.status is Status.CLAIMED), (
                f"{id} is {job.status} but the oracle says held={id in self.held}")
            if id in self.held:
                assert self.held[id] == (job.run_count, job.claimed_by)


def _check_job(job: JobRecord, entries: list[tuple[Any, ...]]) -> None:
    if job.status is Status.CLAIMED:
        assert job.claimed_by and job.claim_expires_at is not None, "claimed without owner/lease"
    else:
        assert job.claimed_by is None and job.claim_expires_at is None, "unclaimed with an owner"
    assert (job.finished_at is not None) == job.status.terminal, "finished_at vs status"
    assert 0 <= job.failure_count <= job.max_failures, "failure budget overrun"
    runs = [e[2] for e in entries if Outcome(e[4]).is_execution]
    settled_runs = job.run_count - (1 if job.status is Status.CLAIMED else 0)
    assert runs == list(range(1, settled_runs + 1)), (
        f"journal runs {runs} for run_count {job.run_count} ({job.status})")
    if job.status is Status.DEAD:
        assert entries and Outcome(entries[-1][4]) is Outcome.DEAD


@pytest.fixture(scope="module")
def model_prefix(pg_dsn: str) -> Iterator[str]:
    with migrated_prefix(pg_dsn) as prefix:
        yield prefix


@pytest.mark.timeout(1800)
def test_memory_and_postgres_agree(pg_dsn: str, model_prefix: str) -> None:
    machine = type("Machine", (StoresMachine,), {"dsn": pg_dsn, "prefix": model_prefix})
    run_state_machine_as_test(machine, settings=settings.get_profile(PROFILE))
