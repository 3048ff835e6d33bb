"""Outcomes of a run, with the worker in the loop (rules 1, 5, 6, 7, 13), both stores."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from typing import Any, ClassVar

import pytest

import venturi
from venturi import Outcome, Queue, Status
from venturi.store.base import NewJob, Store

from ..conftest import wait_for
from .conftest import running

pytestmark = pytest.mark.timeout(60)
SEEN: dict[str, list[Any]] = {}


class Note(venturi.Task, kind="w.note"):
    text: str

    async def run(self, ctx: venturi.Context) -> str:
        ctx.attach(chars=len(self.text))
        return f"noted {len(self.text)}"


class AttachThenFail(venturi.Task, kind="w.attach-then-fail", max_failures=1):
    async def run(self, ctx: venturi.Context) -> None:
        ctx.attach(step="upload")
        raise OSError("the message is not stored")


class Pauser(venturi.Task, kind="w.pauser"):
    async def run(self, ctx: venturi.Context) -> venturi.Pause | None:
        SEEN.setdefault("pauser", []).append(ctx.carry)
        if ctx.carry is None:
            return venturi.Pause(dt.timedelta(milliseconds=50), carry={"step": 1})
        if ctx.carry == {"step": 1}:
            ctx.carry = {"step": 2}
            return venturi.Pause(dt.timedelta(0))  # keeps ctx.carry
        return None


class Failing(venturi.Task, kind="w.failing", max_failures=3):
    secret: str = "payload-secret"

    def backoff(self, failures: int) -> dt.timedelta:
        return dt.timedelta(0)

    async def run(self, ctx: venturi.Context) -> None:
        ctx.carry = {"tries": (ctx.carry or {}).get("tries", 0) + 1}
        raise RuntimeError(f"boom {self.secret}")


class Quitter(venturi.Task, kind="w.quitter"):
    async def run(self, ctx: venturi.Context) -> None:
        raise venturi.GiveUp("unsupported-format")


class Strict(venturi.Task, kind="w.strict"):
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Sleepy(venturi.Task, kind="w.sleepy", timeout=dt.timedelta(milliseconds=200),
             max_failures=2):
    def backoff(self, failures: int) -> dt.timedelta:
        return dt.timedelta(0)

    async def run(self, ctx: venturi.Context) -> None:
        await asyncio.sleep(30)


STOPPED_AFTER: dict[str, float] = {}
ORDER: list[str] = []


class Patient(venturi.Task, kind="w.patient", timeout=dt.timedelta(seconds=20), max_failures=1):
    """Starts first, with a far timeout: the deadline watcher's only target at first. It
    ends once Hasty was stopped, or after 15 s: by then a timer left at its own 20 s
    deadline has not stopped Hasty yet."""

    running: ClassVar[asyncio.Event]

    async def run(self, ctx: venturi.Context) -> None:
        Patient.running.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(Hasty.stopped.wait(), 15)
        ORDER.append("patient ended")


class Hasty(venturi.Task, kind="w.hasty", timeout=dt.timedelta(milliseconds=150),
            max_failures=1):
    stopped: ClassVar[asyncio.Event]

    async def run(self, ctx: venturi.Context) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await asyncio.sleep(30)
        finally:
            STOPPED_AFTER["hasty"] = loop.time() - began
            ORDER.append("hasty stopped")
            Hasty.stopped.set()


async def drain_all(queue: Queue, *tasks: type[venturi.Task], **options: Any) -> venturi.Worker:
    worker = venturi.Worker(queue, tasks=list(tasks), concurrency=4, **options)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    return worker


@pytest.fixture(params=["memory", "postgres"])
def wstore(request: pytest.FixtureRequest) -> Store:
    """Worker tests run on database time (no manual clock)."""
    if request.param == "memory":
        return venturi.MemoryStore()
    result: Store = request.getfixturevalue("pg_store_dbclock")
    return result


@pytest.fixture
def wqueue(wstore: Store) -> Queue:
    return Queue(wstore)


async def test_return_string_is_the_note_and_attach_the_attachment(wqueue: Queue) -> None:
    job = await wqueue.enqueue(Note(text="hello"))
    await drain_all(wqueue, Note)
    row = await wqueue.job(job.id)
    assert row is not None and row.status is Status.COMPLETED
    (entry,) = await wqueue.journal(job.id)
    assert (entry.outcome, entry.note, entry.attachment) == (Outcome.COMPLETED, "noted 5",
                                                             {"chars": 5})


async def test_a_failed_run_keeps_what_it_attached(wqueue: Queue) -> None:
    job = await wqueue.enqueue(AttachThenFail())
    await drain_all(wqueue, AttachThenFail)
    (entry,) = await wqueue.journal(job.id)
    assert (entry.outcome, entry.note, entry.attachment) == (Outcome.DEAD, "OSError",
                                                             {"step": "upload"})


async def test_pause_keeps_budget_and_carries_state(wqueue: Queue) -> None:
    SEEN["pauser"] = []
    job = await wqueue.enqueue(Pauser())
    await drain_all(wqueue, Pauser)
    # until_empty returns when nothing is runnable; the 50 ms pause may still be ahead.
    for _ in range(3):
        row = await wqueue.job(job.id)
        if row is not None and row.status is Status.COMPLETED:
            break
        await asyncio.sleep(0.06)
        await drain_all(wqueue, Pauser)
    row = await wqueue.job(job.id)
    assert row is not None and row.status is Status.COMPLETED
    assert row.failure_count == 0 and row.run_count == 3
    assert row.carry == {"step": 2}  # completion keeps the stored carry
    assert SEEN["pauser"] == [None, {"step": 1}, {"step": 2}]
    outcomes = [e.outcome for e in await wqueue.journal(job.id)]
    assert outcomes == [Outcome.PAUSED, Outcome.PAUSED, Outcome.COMPLETED]


class Overruled(venturi.Task, kind="w.overruled"):
    """Sets ctx.carry, then pauses with a carry of its own."""

    async def run(self, ctx: venturi.Context) -> venturi.Pause:
        ctx.carry = {"from": "ctx"}
        return venturi.Pause(dt.timedelta(hours=1), carry={"from": "pause"})


async def test_a_pause_carry_wins_over_ctx_carry(wqueue: Queue) -> None:
    job = await wqueue.enqueue(Overruled())
    await drain_all(wqueue, Overruled)  # paused for an hour: nothing runnable is left
    row = await wqueue.job(job.id)
    assert row is not None and (row.status, row.run_count, row.failure_count) == (
        Status.PENDING, 1, 0)
    assert row.carry == {"from": "pause"}
    assert [e.outcome for e in await wqueue.journal(job.id)] == [Outcome.PAUSED]


class Interrupted(venturi.Task, kind="w.interrupted", lease=dt.timedelta(seconds=30)):
    """Records progress in ctx.carry, then runs until the worker stops it."""

    progressed: ClassVar[asyncio.Event]

    async def run(self, ctx: venturi.Context) -> None:
        ctx.carry = {"page": 3}
        Interrupted.progressed.set()
        await asyncio.sleep(60)


async def test_a_release_persists_ctx_carry(wqueue: Queue) -> None:
    """A drain releases the running job with what the handler put in ctx.carry, so the
    next run resumes from there; a release is no failure."""
    Interrupted.progressed = asyncio.Event()
    job = await wqueue.enqueue(Interrupted())
    worker = venturi.Worker(wqueue, tasks=[Interrupted], concurrency=1)
    async with running(worker):
        await wait_for(Interrupted.progressed.is_set, what="the handler to set its carry")
    row = await wqueue.job(job.id)
    assert row is not None and (row.status, row.run_count, row.failure_count) == (
        Status.PENDING, 1, 0)
    assert row.carry == {"page": 3}
    assert [(e.run_no, e.outcome, e.note) for e in await wqueue.journal(job.id)] == [
        (1, Outcome.RELEASED, "drain")]


async def test_exceptions_retry_then_die_with_a_classified_note(wqueue: Queue) -> None:
    job = await wqueue.enqueue(Failing())
    await drain_all(wqueue, Failing)
    row = await wqueue.job(job.id)
    assert row is not None and row.status is Status.DEAD and row.failure_count == 3
    assert row.carry == {"tries": 3}  # retry and dead persist ctx.carry
    entries = await wqueue.journal(job.id)
    assert [(e.run_no, e.outcome) for e in entries] == [
        (1, Outcome.RETRIED), (2, Outcome.RETRIED), (3, Outcome.DEAD)]
    assert {e.note for e in entries} == {"RuntimeError"}  # never the message or payload


async def test_give_up_kills_at_once(wqueue: Queue) -> None:
    job = await wqueue.enqueue(Quitter())
    await drain_all(wqueue, Quitter)
    row = await wqueue.job(job.id)
    assert row is not None and row.status is Status.DEAD and row.failure_count == 1
    (entry,) = await wqueue.journal(job.id)
    assert (entry.outcome, entry.note) == (Outcome.DEAD, "unsupported-format")


async def test_undecodable_payload_dies_classified_and_worker_goes_on(
        wqueue: Queue, wstore: Store) -> None:
    bad = NewJob(id=venturi._ids.uuid7(), kind="w.strict", payload='{"url": "renamed"}')
    await wstore.enqueue([bad])
    good = await wqueue.enqueue(Strict(uri="file:///ok"))
    await drain_all(wqueue, Strict)
    row = await wqueue.job(bad.id)
    assert row is not None and row.status is Status.DEAD
    (entry,) = await wqueue.journal(bad.id)
    assert entry.note == "payload-unknown-field"
    good_row = await wqueue.job(good.id)
    assert good_row is not None and good_row.status is Status.COMPLETED


async def test_task_timeout_counts_as_a_failure(wqueue: Queue) -> None:
    job = await wqueue.enqueue(Sleepy())
    await drain_all(wqueue, Sleepy)
    row = await wqueue.job(job.id)
    assert row is not None and row.status is Status.DEAD and row.failure_count == 2
    assert [e.note for e in await wqueue.journal(job.id)] == ["timeout", "timeout"]


async def test_a_later_run_with_a_nearer_timeout_is_stopped_on_time(wqueue: Queue) -> None:
    """One timer serves every run: a run that starts after another and is due before it
    moves that timer earlier, so it is stopped at its own timeout, while the first one
    still runs (not when the first one's run or deadline ends)."""
    STOPPED_AFTER.clear()
    ORDER.clear()
    Patient.running, Hasty.stopped = asyncio.Event(), asyncio.Event()
    patient = await wqueue.enqueue(Patient())
    worker = venturi.Worker(wqueue, tasks=[Patient, Hasty], concurrency=2)
    runner = asyncio.create_task(worker.run(until_empty=True))
    try:
        await wait_for(Patient.running.is_set, what="the patient run to start")
        hasty = await wqueue.enqueue(Hasty())
        await asyncio.wait_for(runner, 30)
    finally:
        runner.cancel()
    assert ORDER == ["hasty stopped", "patient ended"], ORDER
    # Not before its own timeout, and at it: not at Patient's (20 s) or Patient's end.
    assert 0.14 <= STOPPED_AFTER["hasty"] < 5, STOPPED_AFTER
    assert [e.note for e in await wqueue.journal(hasty.id)] == ["timeout"]
    assert [e.outcome for e in await wqueue.journal(patient.id)] == [Outcome.COMPLETED]


async def test_failure_logs_carry_a_plain_traceback_not_exc_info(wqueue: Queue) -> None:
    """Renderers that print locals (structlog's console default) never get the frame
    objects: the traceback travels as text, so payloads in locals stay out of the logs."""
    from structlog.testing import capture_logs

    await wqueue.enqueue(Failing())
    with capture_logs() as logs:
        await drain_all(wqueue, Failing)
    failed = [e for e in logs if e["event"] == "job_failed"]
    assert len(failed) == 3
    for event in failed:
        assert "exc_info" not in event
        assert event["traceback"].endswith("RuntimeError: boom payload-secret")
        assert event["error"] == "RuntimeError"


class Awkward(venturi.Task, kind="w.awkward", max_failures=1):
    """Awaits a task that gets cancelled: the CancelledError is the handler's own."""

    async def run(self, ctx: venturi.Context) -> None:
        inner = asyncio.create_task(asyncio.sleep(30))
        await asyncio.sleep(0)
        inner.cancel()
        await inner


async def test_a_cancelled_error_of_the_handlers_own_is_a_failure_not_a_lost_slot(
        wqueue: Queue) -> None:
    awkward = await wqueue.enqueue(Awkward())
    notes = await wqueue.enqueue_many([Note(text=f"n{i}") for i in range(3)])
    worker = venturi.Worker(wqueue, tasks=[Awkward, Note], concurrency=1)  # one slot
    await asyncio.wait_for(worker.run(until_empty=True), 10)
    assert worker.exit_code == 0
    assert [(e.outcome, e.note) for e in await wqueue.journal(awkward.id)] == [
        (Outcome.DEAD, "asyncio.exceptions.CancelledError")]
    for job_id in notes:
        row = await wqueue.job(job_id)
        assert row is not None and row.status is Status.COMPLETED
