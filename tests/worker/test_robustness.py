"""Bad input from outside and transient failures at awkward moments must not stop a worker."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any, ClassVar

import anyio
import asyncpg
import pytest
from structlog.testing import capture_logs

import venturi
from venturi import Queue, Status
from venturi.errors import DatabaseConflict, DatabaseError, DatabaseUnavailable

from ..conftest import wait_for
from .conftest import running
from .spies import record

pytestmark = pytest.mark.timeout(60)


class Ping(venturi.Task, kind="wr.ping"):
    async def run(self, ctx: venturi.Context) -> str:
        return "pong"


async def completes(queue: Queue) -> None:
    job = await queue.enqueue(Ping())

    async def done() -> bool:
        row = await queue.job(job.id)
        return row is not None and row.status is Status.COMPLETED
    await wait_for(done, what="a job to complete")


async def test_malformed_control_messages_are_logged_and_ignored(pgq: Queue) -> None:
    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=1, name="ctl")
    bad: list[Any] = [
        {"op": "drain", "worker": "ctl", "grace": "soon"},
        {"op": "drain", "worker": "ctl", "grace": [1]},
        {"op": "cancel", "ids": 5},
        {"op": "cancel", "ids": "not-a-list"},
        ["op", "drain"],
        "drain",
    ]
    with capture_logs() as logs:
        async with running(worker):
            for message in bad:
                await pgq.store.notify_control(message)
            await completes(pgq)  # notifications arrive in order: all of the above were read
            assert worker.health.ready and not worker.draining
            invalid = [e for e in logs if e["event"] == "control_message_invalid"]
            assert len(invalid) == len(bad)
            await pgq.store.notify_control({"op": "drain", "worker": "ctl", "grace": 0})
            await wait_for(lambda: worker.draining, what="a valid drain after the bad ones")


async def test_a_transient_failure_after_taking_the_name_lock_does_not_refuse_the_name(
        pgq: Queue) -> None:
    store = pgq.store
    real = store.recover_boot
    calls: list[str] = []

    async def flaky_recover_boot(name: str, claimed_by: str) -> Any:
        calls.append(name)
        if len(calls) == 1:
            raise DatabaseUnavailable("injected: connection lost after the lock was taken")
        return await real(name, claimed_by)

    store.recover_boot = flaky_recover_boot  # type: ignore[method-assign]
    try:
        worker = venturi.Worker(pgq, tasks=[Ping], concurrency=1, name="steady")
        async with running(worker):
            assert worker.name == "steady" and calls == ["steady", "steady"]
            await completes(pgq)
    finally:
        del store.recover_boot


class Waits(venturi.Task, kind="wr.waits", lease=dt.timedelta(seconds=30)):
    """Runs until cancelled, and says so."""

    cancelled: ClassVar[asyncio.Event]

    async def run(self, ctx: venturi.Context) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            Waits.cancelled.set()


class Trips(venturi.Task, kind="wr.trips"):
    """Takes the database away (for the spies) as it finishes: its settlement is buffered."""

    outage: ClassVar[bool] = False

    async def run(self, ctx: venturi.Context) -> str:
        Trips.outage = True
        return "tripped"


async def test_drain_does_not_wait_for_the_database_to_take_buffered_settlements(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 15 meets drain: after an outage the claimer first waits for the buffered
    settlements to be written, which lasts as long as the outage; a drain releases the
    running job at once all the same. The drain comes once the settler has retried a few
    times: by then the claimer has woken (the job's end wakes it) and is in that wait."""
    Waits.cancelled = asyncio.Event()
    Trips.outage = False

    def outage() -> BaseException | None:
        return DatabaseUnavailable("injected: the database is unreachable") if Trips.outage \
            else None

    record(monkeypatch, pgq.store, "claim", fail=outage)
    settles = record(monkeypatch, pgq.store, "settle_many", fail=outage)
    worker = venturi.Worker(pgq, tasks=[Trips, Waits], concurrency=2, max_backoff=0.01)
    with capture_logs() as logs:
        async with running(worker):
            waits = await pgq.enqueue(Waits())
            await wait_for(lambda: worker.held == 1, what="the long job to start")
            trips = await pgq.enqueue(Trips())
            try:
                await wait_for(lambda: sum(c.error is not None for c in settles) >= 5,
                               what="the settler to retry the buffered settlement")
                assert any(e["event"] == "db_unavailable" for e in logs)
                worker.request_drain(0)
                await wait_for(Waits.cancelled.is_set, timeout=3,
                               what="the drain to release the running job")
            finally:
                Trips.outage = False
    assert [e.outcome for e in await pgq.journal(trips.id)] == [venturi.Outcome.COMPLETED]
    assert [e.outcome for e in await pgq.journal(waits.id)] == [venturi.Outcome.RELEASED]


class NulNote(venturi.Task, kind="wr.nulnote"):
    give_up: bool = False

    async def run(self, ctx: venturi.Context) -> str:
        if self.give_up:
            raise venturi.GiveUp("bad\x00reason")
        return "done\x00here"


async def test_a_nul_in_a_note_is_replaced_not_fatal(pgq: Queue) -> None:
    """PostgreSQL's text cannot hold NUL: a handler returning one used to fail its
    settle batch and end the worker."""
    done = await pgq.enqueue(NulNote())
    gave_up = await pgq.enqueue(NulNote(give_up=True))
    worker = venturi.Worker(pgq, tasks=[NulNote], concurrency=2)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    assert worker.exit_code == 0
    assert [(e.outcome, e.note) for e in await pgq.journal(done.id)] == [
        (venturi.Outcome.COMPLETED, "done\ufffdhere")]
    assert [(e.outcome, e.note) for e in await pgq.journal(gave_up.id)] == [
        (venturi.Outcome.DEAD, "bad\ufffdreason")]


class Fragile(venturi.Task, kind="wr.fragile", lease=dt.timedelta(seconds=1)):
    n: int

    async def run(self, ctx: venturi.Context) -> None:
        return None


async def test_a_settlement_the_database_refuses_is_dropped_and_recovered_not_fatal(
        pgq: Queue) -> None:
    """A batch the database refuses (not an outage) is settled one by one: the others
    land, the refused one is logged and left to lease expiry, and the worker goes on."""
    jobs = await pgq.enqueue_many([Fragile(n=i) for i in range(20)])
    poisoned = jobs[7]
    store = pgq.store
    real = store.settle_many
    refusals = 0

    async def refusing(claimed_by: str, batch: Any) -> Any:
        nonlocal refusals
        if any(s.id == poisoned and s.run_no == 1 for s in batch):
            refusals += 1
            raise DatabaseError("value out of range (injected)")
        return await real(claimed_by, batch)

    store.settle_many = refusing  # type: ignore[method-assign]
    try:
        worker = venturi.Worker(pgq, tasks=[Fragile], concurrency=20)
        with capture_logs() as logs:
            async with running(worker):
                await wait_for(lambda: any(e["event"] == "settle_failed" for e in logs),
                               what="the refused settlement")

                async def all_done() -> bool:
                    return await pgq.count(statuses=[Status.COMPLETED]) == 20

                await wait_for(all_done, timeout=20, what="every job, the refused one "
                               "after its lease expired and the reaper recovered it")
                assert worker.health.alive
    finally:
        del store.settle_many
    assert refusals >= 2  # the batch, then the settlement alone
    (failed,) = [e for e in logs if e["event"] == "settle_failed"]
    assert failed["job_id"] == str(poisoned) and failed["error"] == \
        "venturi.errors.DatabaseError"
    outcomes = [(e.run_no, e.outcome) for e in await pgq.journal(poisoned)]
    assert outcomes == [(1, venturi.Outcome.STALE_RECOVERED), (2, venturi.Outcome.COMPLETED)]


async def test_a_settlement_that_loses_a_race_is_written_again_not_dropped(pgq: Queue) -> None:
    """A settle rolled back for a deadlock (a cancel crossing it, say) is tried again: the
    job completes on its first run, with no lease expiry and no second run."""
    jobs = await pgq.enqueue_many([Fragile(n=i) for i in range(10)])
    crossed = jobs[3]
    store = pgq.store
    real = store.settle_many
    conflicts = 0

    async def deadlocked_twice(claimed_by: str, batch: Any) -> Any:
        nonlocal conflicts
        if conflicts < 2 and any(s.id == crossed for s in batch):
            conflicts += 1  # the batch's first two tries; it is sent again whole
            raise DatabaseConflict("database conflict 40P01: deadlock detected (injected)")
        return await real(claimed_by, batch)

    store.settle_many = deadlocked_twice  # type: ignore[method-assign]
    try:
        worker = venturi.Worker(pgq, tasks=[Fragile], concurrency=10)
        with capture_logs() as logs:
            async with running(worker):
                async def all_done() -> bool:
                    return await pgq.count(statuses=[Status.COMPLETED]) == 10

                await wait_for(all_done, timeout=10, what="every job, the crossed one too")
    finally:
        del store.settle_many
    assert conflicts == 2
    retried = [e for e in logs if e["event"] == "settle_batch_conflict_retried"]
    assert [e["attempt"] for e in retried] == [1, 2]
    assert not [e for e in logs if e["event"] in ("settle_failed", "settle_batch_refused")]
    outcomes = [(e.run_no, e.outcome) for e in await pgq.journal(crossed)]
    assert outcomes == [(1, venturi.Outcome.COMPLETED)]


class Counted(venturi.Task, kind="wr.counted"):
    n: int

    async def run(self, ctx: venturi.Context) -> str:
        return f"{len(str(self.n))} digits"


async def test_a_payload_number_beyond_a_double_does_not_end_the_worker(
        pgq: Queue, pg_dsn: str) -> None:
    """jsonb stores 1e400 (and prints it as a 401-digit integer); orjson refuses to parse
    it. Written by other software, such a row used to fail every claim that took it,
    ending the worker at each restart. It is an int, so the task runs; a payload nested
    deeper than the parsers go kills its job with a classified reason."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        bad = uuid.uuid4()
        await conn.execute(
            f"INSERT INTO {pgq.prefix}jobs (id, kind, payload) VALUES ($1, 'wr.counted', "
            "'{\"n\": 1e400}')", bad)
        deep = uuid.uuid4()  # deeper than any JSON parser here recurses
        await conn.execute(
            f"INSERT INTO {pgq.prefix}jobs (id, kind, payload) VALUES ($1, 'wr.counted', $2)",
            deep, '{"n": ' + "[" * 5000 + "]" * 5000 + "}")
    finally:
        await conn.close()
    good = await pgq.enqueue(Counted(n=1))
    worker = venturi.Worker(pgq, tasks=[Counted], concurrency=2)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    assert worker.exit_code == 0
    assert [(e.outcome, e.note) for e in await pgq.journal(bad)] == [
        (venturi.Outcome.COMPLETED, "401 digits")]
    ((outcome, note),) = [(e.outcome, e.note) for e in await pgq.journal(deep)]
    assert outcome is venturi.Outcome.DEAD and note and note.startswith("payload-"), note
    row = await pgq.job(good.id)
    assert row is not None and row.status is Status.COMPLETED
