"""Leases kept by renewal, taken back by the reaper, and renewal as the backstop of a
lost cancel notice (DESIGN §4 rules 8 and 11; docs/concepts/leases.md). In-process
workers on PostgreSQL; the store's renewal and reaper calls are watched with spies."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
from typing import Any, ClassVar
from uuid import UUID

import asyncpg
import pytest
from structlog.testing import capture_logs

import venturi
from venturi import Outcome, Queue, Status
from venturi.errors import DatabaseConflict, DatabaseUnavailable
from venturi.store.base import ClaimRequest, Listener
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .conftest import listen_backend, running, take_over
from .spies import Stalls, gaps, record

pytestmark = pytest.mark.timeout(60)
# Renewal waits a third of the lease after each reply, and a run is stopped two thirds
# after the send of its last renewal: a third of the lease is all the slack a renewal's
# round trip and the loop's lateness get. 3 s leaves a second of it (a busy 2-core CI
# machine can eat a third of 1 s).
LEASE = 3.0


class Outlives(venturi.Task, kind="wl.outlives", lease=dt.timedelta(seconds=LEASE)):
    """Runs for two of its leases: past its first local deadline (2/3 lease) and past the
    lease the claim started with, so only renewal lets it finish."""

    async def run(self, ctx: venturi.Context) -> str:
        await asyncio.sleep(2 * LEASE)
        return "outlived"


async def test_renewal_keeps_a_handler_that_outlives_its_lease_and_it_completes_once(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without renewal the local deadline would cancel each run after 2/3 of its lease,
    and the reaper (every half lease) would recover the rows: a second run, a
    ``stale-recovered`` entry. Renewal is one statement for all the running jobs."""
    renewals = record(monkeypatch, pgq.store, "extend_leases")
    jobs = await pgq.enqueue_many([Outlives() for _ in range(3)])
    worker = venturi.Worker(pgq, tasks=[Outlives], concurrency=3)
    with capture_logs() as logs:
        await asyncio.wait_for(worker.run(until_empty=True), 30)
    assert not [e for e in logs if e["event"] in ("lease_lost", "job_recovered",
                                                  "settle_refused")]
    for id in jobs:
        row = await pgq.job(id)
        assert row is not None
        assert (row.status, row.run_count, row.failure_count) == (Status.COMPLETED, 1, 0)
        assert [(e.run_no, e.outcome, e.note) for e in await pgq.journal(id)] == [
            (1, Outcome.COMPLETED, "outlived")]
    # One statement renews every held job: the three ran side by side, so each renewal
    # while they ran carried all three.
    while_running = [c for c in renewals if c.ended is not None and c.result == set(jobs)]
    assert len(while_running) >= 3, renewals
    for call in renewals:
        claimed_by, batch = call.args
        assert claimed_by == worker.claimed_by
        assert {r.id for r in batch} <= set(jobs) and len(batch) == len({r.id for r in batch})
    assert {r.id for r in renewals[0].args[1]} == set(jobs)
    # About every third of the lease: never sooner than a third after the previous one.
    assert min(gaps(renewals)) >= LEASE / 3 * 0.95, gaps(renewals)


class LongLease(venturi.Task, kind="wl.longlease", lease=dt.timedelta(seconds=60)):
    async def run(self, ctx: venturi.Context) -> str:
        return "recovered-and-run"


class ShortLease(venturi.Task, kind="wl.shortlease", lease=dt.timedelta(seconds=0.5)):
    async def run(self, ctx: venturi.Context) -> None:
        return None


async def _stale_claim(store: PostgresStore, task: type[venturi.Task], queue: Queue) -> UUID:
    """A job claimed by a worker that is gone, its lease already expired."""
    job = await queue.enqueue(task())
    (claimed,) = await store.claim(ClaimRequest(
        "vanished/0", {task.__task__.kind: dt.timedelta(milliseconds=1)}, 1))
    assert claimed.id == job.id

    async def expired() -> bool:
        return bool(await store.pool.fetchval(
            f"SELECT claim_expires_at < clock_timestamp() FROM {store.prefix}jobs"
            " WHERE id = $1", job.id))
    await wait_for(expired, what="the vanished worker's lease to expire")
    return job.id


async def test_reaper_sweeps_at_boot(pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker serving only a 60 s lease sweeps every 30 s, and once at boot: an expired
    claim that is there when it starts is recovered at once, not half a lease later."""
    store = pgq.store
    assert isinstance(store, PostgresStore)
    stale = await _stale_claim(store, LongLease, pgq)
    sweeps = record(monkeypatch, store, "recover_stale")
    worker = venturi.Worker(pgq, tasks=[LongLease], concurrency=1)
    async with running(worker):
        async def done() -> bool:
            row = await pgq.job(stale)
            return row is not None and row.status is Status.COMPLETED
        await wait_for(done, timeout=15, what="the stale claim to be recovered and run")
    assert len(sweeps) == 1  # the boot sweep did it: the next one was 30 s away
    assert [(e.run_no, e.outcome, e.note) for e in await pgq.journal(stale)] == [
        (1, Outcome.STALE_RECOVERED, "lease-expired"), (2, Outcome.COMPLETED, "recovered-and-run")]


async def test_reaper_sweeps_every_half_of_the_shortest_lease(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Serving a 60 s and a 0.5 s lease, the reaper sweeps every 0.25 s: five sweeps take
    about a second here, and 120 s on the longer lease's cadence (20 s on the default's).
    No gap is shorter than the period, and none longer than the period plus what the loop
    stood still meanwhile (a reaper on a whole lease's cadence, 0.5 s, fails)."""
    sweeps = record(monkeypatch, pgq.store, "recover_stale")
    worker = venturi.Worker(pgq, tasks=[LongLease, ShortLease], concurrency=1)
    async with running(worker), Stalls() as stalls:
        await wait_for(lambda: len(sweeps) >= 6, timeout=15, what="six sweeps")
    # From the second sweep on: the first follows the boot sweep, before the reference ran.
    later = sweeps[1:6]
    assert min(gaps(later)) >= 0.25 * 0.95, gaps(sweeps)
    for a, b in itertools.pairwise(later):
        # The reaper sleeps its period once a sweep has returned: the sweep's own round
        # trip is part of the gap.
        assert a.ended is not None
        allowed = 0.25 + (a.ended - a.began) + stalls.within(a.began, b.began) + 0.05
        assert b.began - a.began <= allowed, (b.began - a.began, allowed, gaps(sweeps))


class Probe:
    """Per job: it started, it was cancelled; one gate they all wait on."""

    started: dict[UUID, asyncio.Event]
    cancelled: dict[UUID, asyncio.Event]
    gate: asyncio.Event

    @classmethod
    def reset(cls) -> None:
        cls.started, cls.cancelled, cls.gate = {}, {}, asyncio.Event()

    @classmethod
    def event(cls, table: dict[UUID, asyncio.Event], id: UUID) -> asyncio.Event:
        return table.setdefault(id, asyncio.Event())

    @classmethod
    async def hold(cls, ctx: venturi.Context) -> None:
        cls.event(cls.started, ctx.job_id).set()
        try:
            await cls.gate.wait()
        except BaseException:
            cls.event(cls.cancelled, ctx.job_id).set()
            raise


class Pacer(venturi.Task, kind="wl.pacer", lease=dt.timedelta(seconds=LEASE)):
    """Held alongside a long-lease job, it makes renewal run every second (a third of its
    lease): a claim lost or cancelled is found within a second or so."""

    async def run(self, ctx: venturi.Context) -> None:
        await Probe.hold(ctx)


class Patient(venturi.Task, kind="wl.patient", lease=dt.timedelta(seconds=30)):
    """A 30 s lease: its local deadline is 20 s after its last renewal, so within the
    tests' waits only a renewal that finds its claim gone can stop it."""

    async def run(self, ctx: venturi.Context) -> None:
        await Probe.hold(ctx)


@pytest.fixture(autouse=True)
def probe() -> type[Probe]:
    Probe.reset()
    return Probe


def events(logs: list[dict[str, Any]], name: str, job_id: UUID | None = None) -> list[Any]:
    return [e for e in logs
            if e["event"] == name and (job_id is None or e.get("job_id") == str(job_id))]


async def _both_running(pgq: Queue, probe: type[Probe]) -> tuple[UUID, UUID]:
    pacer = (await pgq.enqueue(Pacer())).id
    patient = (await pgq.enqueue(Patient())).id
    for id in (pacer, patient):
        await wait_for(probe.event(probe.started, id).is_set, what="both jobs to start")
    return pacer, patient


async def test_renewal_finding_the_claim_lost_cancels_the_handler(
        pgq: Queue, probe: type[Probe]) -> None:
    store = pgq.store
    assert isinstance(store, PostgresStore)
    worker = venturi.Worker(pgq, tasks=[Pacer, Patient], concurrency=2)
    with capture_logs() as logs:
        async with running(worker):
            pacer, patient = await _both_running(pgq, probe)
            await take_over(store, patient, worker.claimed_by, Patient)
            # A renewal (every second, for the pacer) finds epoch 1 gone.
            await wait_for(probe.event(probe.cancelled, patient).is_set, timeout=10,
                           what="the handler to be cancelled")
            await wait_for(lambda: events(logs, "lease_lost", patient), what="lease_lost")
            assert worker.held == 1 and not probe.event(probe.cancelled, pacer).is_set()
            probe.gate.set()
    # Nothing settled for the lost epoch: the new one still holds the row.
    row = await pgq.job(patient)
    assert row is not None and (row.status, row.run_count) == (Status.CLAIMED, 2)
    assert [e.outcome for e in await pgq.journal(patient)] == [Outcome.STALE_RECOVERED]
    assert not events(logs, "settle_refused")
    assert [e.outcome for e in await pgq.journal(pacer)] == [Outcome.COMPLETED]


class Unreachable(Listener):
    """The LISTEN connection cannot be made."""

    async def __aenter__(self) -> Unreachable:
        raise DatabaseUnavailable("injected: the LISTEN connection is down")

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def receive(self) -> tuple[str, str]:
        raise AssertionError("never connected")


async def test_a_cancel_whose_notice_is_lost_is_found_by_renewal(
        pgq: Queue, probe: type[Probe], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 11's backstop: with the LISTEN connection down, the control message of a cancel
    reaches nobody; the next renewal finds the row gone and the handler is cancelled,
    settling nothing, long before its own local deadline."""
    store = pgq.store
    assert isinstance(store, PostgresStore)
    listen_down = False
    real_listen = store.listen
    monkeypatch.setattr(store, "listen", lambda: Unreachable() if listen_down else real_listen())
    worker = venturi.Worker(pgq, tasks=[Pacer, Patient], concurrency=2, poll_interval=60)
    with capture_logs() as logs:
        async with running(worker):
            pacer, patient = await _both_running(pgq, probe)
            listen_down = True
            backend = await listen_backend(store)
            await store.pool.execute("SELECT pg_terminate_backend($1)", backend)
            await wait_for(lambda: not worker.health.listening, what="LISTEN to be down")

            assert await pgq.cancel(ids=[patient]) == 1
            await wait_for(probe.event(probe.cancelled, patient).is_set, timeout=10,
                           what="renewal to find the cancelled job gone")
            await wait_for(lambda: events(logs, "lease_lost", patient), what="lease_lost")
            assert not worker.health.listening  # no notice can have reached it
            assert not events(logs, "job_cancelled")
            assert worker.held == 1 and not probe.event(probe.cancelled, pacer).is_set()

            listen_down = False
            await wait_for(lambda: worker.health.listening, timeout=15, what="LISTEN again")
            probe.gate.set()
            await wait_for(lambda: worker.held == 0, what="the pacer to settle")
    assert await pgq.job(patient) is None
    assert not events(logs, "settle_refused")
    assert [e.outcome for e in await pgq.journal(pacer)] == [Outcome.COMPLETED]


QUICK_LEASE = 1.0  # a renewal is due every third of a second while its settle is held


class Quick(venturi.Task, kind="wl.quick", lease=dt.timedelta(seconds=QUICK_LEASE)):
    async def run(self, ctx: venturi.Context) -> str:
        return "quick"


async def test_a_renewal_never_runs_while_a_settle_of_the_worker_is_out(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A settle and a renewal both lock the worker's own rows, each in its plan's order:
    side by side they can deadlock (40P01; seen with a batch of 1,000 settles,
    benchmarks/results-throughput.md, "A settle and a renewal of the same rows"). They
    take turns. Here the first settle is held for half a lease while its jobs are held
    (settling), so a renewal is due meanwhile (every third of a lease); no renewal may
    begin before that settle has returned, and renewals go on afterwards."""
    settling = 0
    renewal_began = asyncio.Event()
    real_settle = pgq.store.settle_many
    held_once = False

    async def settle_many(*args: Any) -> Any:
        nonlocal settling, held_once
        settling += 1
        try:
            if not held_once:
                held_once = True
                with contextlib.suppress(TimeoutError):  # the renewal that must not come
                    await asyncio.wait_for(renewal_began.wait(), QUICK_LEASE / 2)
            return await real_settle(*args)
        finally:
            settling -= 1

    def began() -> int:
        renewal_began.set()
        return settling

    monkeypatch.setattr(pgq.store, "settle_many", settle_many)
    renewals = record(monkeypatch, pgq.store, "extend_leases", observe=began)
    jobs = await pgq.enqueue_many([Quick() for _ in range(2)])
    worker = venturi.Worker(pgq, tasks=[Quick, Outlives], concurrency=2)
    async with running(worker):
        async def settled() -> bool:
            rows = [await pgq.job(id) for id in jobs]
            return all(r is not None and r.status is Status.COMPLETED for r in rows)
        await wait_for(settled, timeout=15, what="the held settle to go through")
        # Something held for the renewals that follow: a job that outlives its lease.
        await pgq.enqueue(Outlives())
        await wait_for(lambda: len(renewals) >= 2, timeout=15, what="renewals after it")
    assert held_once
    assert [c.seen for c in renewals] == [0] * len(renewals), renewals


class Held6(venturi.Task, kind="wl.held6", lease=dt.timedelta(seconds=6)):
    """Runs until the test lets it end; renewed every 2 s, its local deadline 4 s after
    the last renewal that kept it."""

    started: ClassVar[asyncio.Event]
    release: ClassVar[asyncio.Event]

    async def run(self, ctx: venturi.Context) -> str:
        Held6.started.set()
        await Held6.release.wait()
        return "held"


async def test_a_renewal_that_waits_out_its_lock_timeout_is_sent_again(
        pg_dsn: str, pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a role whose sessions set ``lock_timeout`` (here 100 ms), a renewal that
    finds one of its rows locked by another session (an operator's open transaction)
    is rolled back with 55P03: a DatabaseConflict, sent again 50 ms later, not a reason
    to stop the worker. Once the lock is gone the next renewal keeps the claim, and the
    job completes on its first run."""
    Held6.started, Held6.release = asyncio.Event(), asyncio.Event()
    dsn = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}lock_timeout=100"
    async with Queue.connect(dsn, prefix=pgq.prefix) as queue:
        renewals = record(monkeypatch, queue.store, "extend_leases")
        job = await queue.enqueue(Held6())
        worker = venturi.Worker(queue, tasks=[Held6], concurrency=1)
        operator = await asyncpg.connect(pg_dsn)
        try:
            with capture_logs() as logs:
                async with running(worker):
                    await asyncio.wait_for(Held6.started.wait(), 10)
                    async with operator.transaction():
                        await operator.execute(
                            f"SELECT 1 FROM {pgq.prefix}jobs WHERE id = $1 FOR UPDATE", job.id)
                        await wait_for(lambda: sum(isinstance(c.error, DatabaseConflict)
                                                   for c in renewals) >= 2,
                                       timeout=10, what="two renewals timed out on the lock")
                        assert worker.health.alive
                    lost = len(renewals)
                    await wait_for(lambda: any(c.result == {job.id} for c in renewals[lost:]),
                                   timeout=10, what="a renewal that kept the claim")
                    Held6.release.set()

                    async def done() -> bool:
                        row = await queue.job(job.id)
                        return row is not None and row.status is Status.COMPLETED
                    await wait_for(done, timeout=10, what="the job to complete")
        finally:
            await operator.close()
    assert any(e["event"] == "renewal_conflict" for e in logs)
    assert [(e.run_no, e.outcome) for e in await pgq.journal(job.id)] == [
        (1, Outcome.COMPLETED)]
