"""Claims lost under a running handler, cancels reaching it, and the LISTEN connection
dying under an idle worker (DESIGN §4 rules 4, 8, 11; §6 waker). In-process workers on
PostgreSQL, observed through the database, their logs and their metrics."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any
from uuid import UUID

import pytest
from structlog.testing import capture_logs

import venturi
from venturi import Outcome, Queue, Status
from venturi.errors import ConfigError, DatabaseUnavailable
from venturi.store.base import Action, ClaimRequest, JobRecord, Settlement
from venturi.store.postgres import PostgresStore
from venturi.worker.metrics import WorkerMetrics

from ..conftest import wait_for
from .conftest import listen_backend, running, take_over
from .spies import Call, record

pytestmark = pytest.mark.timeout(60)


class Probe:
    """What a handler tells the test: it started, it was cancelled; and a gate it waits on."""

    started: asyncio.Event
    cancelled: asyncio.Event
    gate: asyncio.Event
    started_at: dict[UUID, float]
    cancelled_at: dict[UUID, dt.datetime]  # wall clock, UTC

    @classmethod
    def reset(cls) -> None:
        cls.started, cls.cancelled, cls.gate = asyncio.Event(), asyncio.Event(), asyncio.Event()
        cls.started_at, cls.cancelled_at = {}, {}

    @classmethod
    async def hold(cls, ctx: venturi.Context) -> None:
        cls.started_at[ctx.job_id] = time.monotonic()
        cls.started.set()
        try:
            await cls.gate.wait()
        except BaseException:
            cls.cancelled_at[ctx.job_id] = dt.datetime.now(dt.UTC)
            cls.cancelled.set()
            raise


class Gated(venturi.Task, kind="wf.gated", lease=dt.timedelta(seconds=30)):
    """Finishes when the test opens the gate; renewal (every 10 s) stays out of the way."""

    async def run(self, ctx: venturi.Context) -> str:
        await Probe.hold(ctx)
        return "slow-done"


@pytest.fixture(autouse=True)
def probe() -> type[Probe]:
    Probe.reset()
    return Probe


HOLDER_SQL = ("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
              " AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0)")


def events(logs: list[dict[str, Any]], name: str, job_id: UUID | None = None) -> list[Any]:
    return [e for e in logs
            if e["event"] == name and (job_id is None or e.get("job_id") == str(job_id))]


async def test_slow_handler_whose_claim_was_taken_over_cannot_settle(
        pgq: Queue, probe: type[Probe]) -> None:
    store = pgq.store
    assert isinstance(store, PostgresStore)
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=1)  # its one slot stays busy
    job = await pgq.enqueue(Gated())
    with capture_logs() as logs:
        async with running(worker):
            await wait_for(probe.started.is_set, what="the handler to start")
            await take_over(store, job.id, worker.claimed_by, Gated)
            row = await pgq.job(job.id)
            assert row is not None and (row.claimed_by, row.run_count) == (worker.claimed_by, 2)

            probe.gate.set()  # the old epoch's handler finishes and tries to settle
            await wait_for(lambda: events(logs, "settle_refused", job.id),
                           what="the old epoch's settle to be refused")
            row = await pgq.job(job.id)
            assert row is not None and (row.status, row.run_count) == (Status.CLAIMED, 2)
            assert [(e.run_no, e.outcome) for e in await pgq.journal(job.id)] == [
                (1, Outcome.STALE_RECOVERED)]

            (settled,) = await store.settle_many(worker.claimed_by, [
                Settlement(job.id, 2, Action.COMPLETE, note="new-epoch")])
            assert settled.applied
    assert [(e.run_no, e.outcome, e.note) for e in await pgq.journal(job.id)] == [
        (1, Outcome.STALE_RECOVERED, "lease-expired"), (2, Outcome.COMPLETED, "new-epoch")]
    assert not events(logs, "job_completed")


async def test_cancel_reaches_a_running_handler_at_once(
        pgq: Queue, probe: type[Probe], monkeypatch: pytest.MonkeyPatch) -> None:
    renewals = record(monkeypatch, pgq.store, "extend_leases")
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=2)
    job = await pgq.enqueue(Gated())
    with capture_logs() as logs:
        async with running(worker):
            await wait_for(probe.started.is_set, what="the handler to start")
            assert await pgq.cancel(ids=[job.id]) == 1
            await wait_for(probe.cancelled.is_set, what="the handler to be cancelled")
            # The lease is 30 s and the first renewal 10 s after the claim: no renewal has
            # run, so the control channel is what stopped the handler.
            assert renewals == []
            await wait_for(lambda: events(logs, "job_cancelled", job.id), what="job_cancelled")
            assert await pgq.job(job.id) is None
            assert worker.held == 0
            # The worker goes on.
            probe.reset()
            probe.gate.set()
            other = await pgq.enqueue(Gated())
            await wait_for(lambda: _status(pgq, other.id, Status.COMPLETED), what="next job")
    assert not events(logs, "settle_refused") and not events(logs, "lease_lost")
    assert not events(logs, "job_released") and await pgq.journal(job.id) == []


async def test_waker_reconnects_after_its_backend_is_terminated(
        pgq: Queue, probe: type[Probe]) -> None:
    store = pgq.store
    assert isinstance(store, PostgresStore)
    metrics = WorkerMetrics()
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=1, poll_interval=60, metrics=metrics)
    with capture_logs() as logs:
        async with running(worker):
            first = await listen_backend(store)
            assert await store.pool.fetchval("SELECT pg_terminate_backend($1)", first)
            await wait_for(lambda: events(logs, "waker_reconnected"), timeout=10,
                           what="the waker to reconnect")
            assert metrics.registry.get_sample_value("venturi_waker_reconnects_total") == 1
            await wait_for(lambda: worker.health.ready, what="ready again")
            (down,) = events(logs, "db_unavailable")
            assert down["service"] == "waker"
            await listen_backend(store, other_than=first)

            # The new connection hears the control channel: a cancel reaches the running
            # handler as `job_cancelled`. Renewal, the only other way, is 10 s away and
            # would log `lease_lost`.
            job = await pgq.enqueue(Gated())
            await wait_for(lambda: job.id in probe.started_at, timeout=20, what="pickup")
            assert await pgq.cancel(ids=[job.id]) == 1
            await wait_for(lambda: events(logs, "job_cancelled", job.id), what="job_cancelled")
    assert not events(logs, "lease_lost")


class Brief(venturi.Task, kind="wf.brief", lease=dt.timedelta(seconds=3)):
    """Held until cancelled; on a lease short enough to watch its local deadline pass."""

    async def run(self, ctx: venturi.Context) -> None:
        await Probe.hold(ctx)


class Blocker(venturi.Task, kind="wf.blocker", lease=dt.timedelta(seconds=1.5)):
    async def run(self, ctx: venturi.Context) -> None:
        time.sleep(0.8)  # noqa: ASYNC251 - blocking the event loop is the point


async def _db_clock_offset(store: PostgresStore) -> tuple[dt.timedelta, dt.timedelta]:
    """(database time - local time, the estimate's uncertainty), from one round trip."""
    before = dt.datetime.now(dt.UTC)
    db: dt.datetime = await store.pool.fetchval("SELECT clock_timestamp()")
    after = dt.datetime.now(dt.UTC)
    return db - (before + (after - before) / 2), (after - before) / 2


def _renewals_fail(monkeypatch: pytest.MonkeyPatch, store: PostgresStore) -> list[Call]:
    """Every renewal fails as if the database were unreachable; the calls, recorded."""
    return record(monkeypatch, store, "extend_leases", fail=lambda: DatabaseUnavailable(
        "injected: renewal cannot reach the database"))


async def _run_to_its_deadline(pgq: Queue, probe: type[Probe]
                               ) -> tuple[venturi.Enqueued, dt.datetime]:
    """One Brief job on a worker of its own, until its handler is stopped and the worker
    logged lease_lost: (the job, the handler's stop time)."""
    worker = venturi.Worker(pgq, tasks=[Brief], concurrency=1)
    with capture_logs() as logs:
        async with running(worker):
            job = await pgq.enqueue(Brief())
            await wait_for(probe.cancelled.is_set, timeout=10, what="the deadline")
            stopped = probe.cancelled_at[job.id]
            await wait_for(lambda: events(logs, "lease_lost", job.id), what="lease_lost")
    return job, stopped


async def test_handler_stops_at_its_local_deadline_when_renewals_fail(
        pgq: Queue, probe: type[Probe], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 8: no renewal, no run past the claim + 2/3 lease, and no settle. It stops
    before its lease runs out in the database, so nobody can have reclaimed it meanwhile."""
    store = pgq.store
    assert isinstance(store, PostgresStore)
    renewals = _renewals_fail(monkeypatch, store)
    lease = Brief.__task__.lease
    job, stopped = await _run_to_its_deadline(pgq, probe)
    assert renewals and all(c.error is not None for c in renewals)
    row = await pgq.job(job.id)
    assert row is not None and (row.status, row.run_count) == (Status.CLAIMED, 1)
    assert await pgq.journal(job.id) == []
    # On the database's clock: after the claim's 2/3 lease, before its lease expired.
    assert row.claim_expires_at is not None
    offset, error = await _db_clock_offset(store)
    stopped_db = stopped + offset
    claimed_at = row.claim_expires_at - lease
    assert claimed_at + lease * 2 / 3 - error <= stopped_db, (claimed_at, stopped_db)
    assert stopped_db < row.claim_expires_at, (stopped_db, row.claim_expires_at)


async def test_a_slow_claim_reply_does_not_move_the_local_deadline(
        pgq: Queue, probe: type[Probe], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 8 again, the claim's reply 1.5 s late (a busy server, a slow link): the
    database started the lease when it ran the claim, so the local deadline counts from
    the claim's send time, not from the reply, and the handler still stops before the
    lease expires in the database."""
    store = pgq.store
    assert isinstance(store, PostgresStore)
    _renewals_fail(monkeypatch, store)
    claim = store.claim

    async def late_reply(request: ClaimRequest) -> list[JobRecord]:
        jobs = await claim(request)
        if jobs:
            await asyncio.sleep(1.5)
        return jobs
    monkeypatch.setattr(store, "claim", late_reply)
    job, stopped = await _run_to_its_deadline(pgq, probe)
    row = await pgq.job(job.id)
    assert row is not None and row.status is Status.CLAIMED, (
        "the lease ran out in the database while the handler still ran: recovered", row)
    assert row.claim_expires_at is not None
    offset, _ = await _db_clock_offset(store)
    assert stopped + offset < row.claim_expires_at, (stopped + offset, row.claim_expires_at)


async def test_event_loop_stall_is_logged(pgq: Queue) -> None:
    worker = venturi.Worker(pgq, tasks=[Blocker], concurrency=1)
    with capture_logs() as logs:
        async with running(worker):
            job = await pgq.enqueue(Blocker())
            await wait_for(lambda: events(logs, "event_loop_stalled"), what="the stall warning")
            await wait_for(lambda: _status(pgq, job.id, Status.COMPLETED), what="completion")
    (stall, *_) = events(logs, "event_loop_stalled")
    assert stall["seconds"] >= 0.5


async def test_cancel_reaches_a_prefetched_job_before_it_runs(
        pgq: Queue, probe: type[Probe]) -> None:
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=1, prefetch=1)
    first = await pgq.enqueue(Gated())
    with capture_logs() as logs:
        async with running(worker):
            await wait_for(probe.started.is_set, what="the first job to start")
            second = await pgq.enqueue(Gated())
            await wait_for(lambda: worker.held == 2, what="the prefetch")
            assert await pgq.cancel(ids=[second.id]) == 1
            await wait_for(lambda: events(logs, "job_cancelled", second.id), what="the cancel")
            assert worker.held == 1
            probe.gate.set()
            await wait_for(lambda: _status(pgq, first.id, Status.COMPLETED), what="first job")
    assert second.id not in probe.started_at and await pgq.job(second.id) is None
    assert not events(logs, "settle_refused")


async def test_worker_drains_when_another_session_takes_its_name(pgq: Queue) -> None:
    """Rule 9: the name's lock, lost and taken elsewhere, is not re-taken: the worker drains."""
    store = pgq.store
    assert isinstance(store, PostgresStore)
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=1, name="contested")
    key = f"venturi:worker:{pgq.prefix}:contested"
    rival = await store.pool.acquire()
    try:
        with capture_logs() as logs:
            async with running(worker):
                (holder,) = await rival.fetch(HOLDER_SQL, key)
                await rival.execute("SELECT pg_terminate_backend($1)", holder["pid"])
                # Queued behind the dying session: granted the moment it ends.
                await rival.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", key)
                await wait_for(lambda: worker.draining, timeout=10, what="the worker to drain")
        assert events(logs, "identity_taken")
        assert worker.exit_code == 0
    finally:
        await rival.execute("SELECT pg_advisory_unlock_all()")
        await store.pool.release(rival)


async def test_worker_takes_its_name_lock_again_after_its_session_dies(
        pgq: Queue, probe: type[Probe]) -> None:
    """Rule 9: the name's lock dies with its session; the worker takes it again on a new
    one, keeps working, and a second worker with the name is still refused."""
    store = pgq.store
    assert isinstance(store, PostgresStore)
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=1, name="steadfast")
    key = f"venturi:worker:{pgq.prefix}:steadfast"

    async def holders() -> list[int]:
        return [r["pid"] for r in await store.pool.fetch(HOLDER_SQL, key)]

    with capture_logs() as logs:
        async with running(worker):
            (first,) = await holders()
            assert await store.pool.fetchval("SELECT pg_terminate_backend($1)", first)

            async def taken_again() -> bool:
                return len(now := await holders()) == 1 and now[0] != first
            await wait_for(taken_again, timeout=15, what="the name's lock on a new session")
            assert events(logs, "identity_lock_lost")
            with pytest.raises(ConfigError, match="held by a live worker"):
                await venturi.Worker(pgq, tasks=[Gated], name="steadfast").run()
            assert worker.health.alive and not worker.draining
            probe.gate.set()
            job = await pgq.enqueue(Gated())
            await wait_for(lambda: _status(pgq, job.id, Status.COMPLETED), what="a job to run")
    assert worker.exit_code == 0 and not events(logs, "identity_taken")


async def _status(queue: Queue, job_id: UUID, status: Status) -> bool:
    row = await queue.job(job_id)
    return row is not None and row.status is status


async def test_a_new_grace_cuts_short_a_drain_already_waiting(
        pgq: Queue, probe: type[Probe]) -> None:
    """`venturi drain --grace 0` sent while a drain waits out a long grace releases the
    running job now, not when the first grace ends."""
    job = await pgq.enqueue(Gated())
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=1, name="graceful")
    runner = asyncio.create_task(worker.run())
    try:
        await wait_for(probe.started.is_set, what="the job to start")
        worker.request_drain(120)
        await wait_for(lambda: worker._grace_scope is not None, what="the drain to wait")
        began = time.monotonic()
        await pgq.store.notify_control({"op": "drain", "worker": "graceful", "grace": 0})
        await asyncio.wait_for(asyncio.shield(runner), 40)
        assert time.monotonic() - began < 30  # not the 120 s of the first grace
    finally:
        runner.cancel()
    assert probe.cancelled.is_set()
    assert [e.outcome for e in await pgq.journal(job.id)] == [Outcome.RELEASED]
