"""Running one claimed job and turning its outcome into a settlement.

Nothing here touches the database: the executor returns a ``Settlement`` (or
``None`` when the run must not settle: its claim was lost or cancelled), and
the settler writes it. So the settle write is never inside the cancel scope
that ends a job.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from .. import _codec, tracing
from .._ids import uuid7
from ..errors import InvalidJob, PayloadDecodeError, classify
from ..logs import get_logger
from ..store.base import Action, Settlement
from ..task import Context, GiveUp, Pause, ResultReader, Task
from .clock import DbClock
from .held import Held, HeldState, StopReason
from .periodic import next_tick
from .runscope import RunScope

log = get_logger("venturi.worker")

MAX_NOTE = 500


def format_traceback(exc: BaseException) -> str:
    """The traceback as text, without local variables: a renderer that shows locals
    (structlog's default on a terminal) would print payloads and credentials."""
    return "".join(traceback.format_exception(exc)).rstrip()


def _encode(value: Any, what: str, held: Held) -> tuple[bool, str | None]:
    if value is None:
        return True, None
    try:
        return True, _codec.dumps(value)
    except InvalidJob as exc:
        log.warning("carry_not_stored", job_id=str(held.id), kind=held.kind, what=what,
                    reason=exc.reason)
        return False, None


def _note(text: str | None) -> str | None:
    """A journal note as PostgreSQL's text can hold it: at most MAX_NOTE characters, and
    no NUL (PostgreSQL refuses it in text, which would fail the whole settle batch)."""
    if text is None:
        return None
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text if len(text) <= MAX_NOTE else text[: MAX_NOTE - 1] + "…"


class Executor:
    def __init__(self, tasks: dict[str, type[Task]], state: Any, clock: DbClock,
                 watch: Callable[[Held], None], *,
                 result_limit: int = _codec.DEFAULT_MAX_PAYLOAD_BYTES,
                 reader: ResultReader | None = None) -> None:
        self.tasks = tasks
        self.state = state
        self._result_limit = result_limit  # ctx.set_result's, the queue's payload limit
        self._reader = reader  # ctx.results' (the store)
        self._db_clock = clock
        self._watch = watch  # tells the deadline watcher of a run starting now
        self._clock = asyncio.get_running_loop().time
        # execute(held) runs the handler and returns what to settle, or None to settle
        # nothing. Tracing is decided once, when the worker starts (set the tracer
        # provider before): untraced, a run goes straight to _execute.
        self._tracer = tracing.tracer()
        self.execute: Callable[[Held], Awaitable[Settlement | None]] = (
            self._execute if self._tracer is None else self._execute_traced)

    def successor(self, cls: type[Task], held: Held) -> tuple[UUID, dt.datetime] | None:
        """The next occurrence of a periodic task (docs/concepts/periodic.md): the first
        tick after now, and after the tick this one ran for. The local estimate of the
        database's time may lag it by a few milliseconds; a run that ends sooner than
        that after its tick would otherwise be given that same tick again, already
        passed, and its successor would run at once: twice for one tick."""
        options = cls.__task__
        if not options.periodic:
            return None
        return uuid7(), next_tick(options, max(self._db_clock.now(), held.record.visible_at))

    def release(self, held: Held) -> Settlement:
        ok, carry = _encode(held.carry, "carry", held)
        return Settlement(held.id, held.run_no, Action.RELEASE, note="drain",
                          set_carry=ok and held.state is HeldState.RUNNING, carry=carry)

    async def _execute_traced(self, held: Held) -> Settlement | None:
        assert self._tracer is not None
        with tracing.process(self._tracer, held.record) as run:
            settlement = await self._execute(held, run)
            return run.settled(settlement, held.stop_reason is StopReason.CANCELLED)

    async def _execute(self, held: Held, run: tracing.Run | None = None) -> Settlement | None:
        cls = self.tasks[held.kind]
        options = cls.__task__
        record = held.record
        held.carry = record.carry
        try:
            task = cls.from_payload(record.payload)
        except PayloadDecodeError as exc:
            log.warning("job_undecodable", job_id=str(held.id), kind=held.kind,
                        reason=exc.classification)
            if run is not None:
                run.failed(exc, exc.classification)
            return Settlement(held.id, held.run_no, Action.KILL, note=exc.classification,
                              successor=self.successor(cls, held))
        ctx = Context(job_id=record.id, kind=record.kind, run_no=record.run_count,
                      carry=record.carry, state=self.state,
                      span=None if run is None else run.span, result_limit=self._result_limit,
                      reader=self._reader)
        held.started = time.monotonic()
        result: Any = None
        error: BaseException | None = None
        # One scope per run, without a deadline of its own: the worker's deadline
        # watcher stops it at the earlier of the local lease deadline (moved by
        # renewals) and the task's timeout (one timer for all runs, not one each).
        now = self._clock()
        held.timeout_at = now + options.timeout.total_seconds()
        with RunScope() as scope:
            held.scope = scope
            if held.stop_reason is not None:  # cancelled before it started
                scope.cancel()
            elif not held.expire(now):  # a prefetched claim may have expired while buffered
                self._watch(held)
            try:
                result = await task.run(ctx)
            except Exception as exc:
                error = exc
            except asyncio.CancelledError as exc:
                # Ours (this run's scope, or the worker stopping) carries a cancel request
                # for this task; one without came from inside the handler (it awaited
                # something cancelled) and is its failure: let through, it would end the
                # slot for good and leave the job claimed.
                current = asyncio.current_task()
                if scope.cancel_called or current is None or current.cancelling():
                    raise
                error = exc
        held.scope = None
        held.carry = ctx.carry
        if error is not None and run is not None:
            run.failed(error, classify(error))

        if scope.cancel_called:
            reason = held.stop_reason  # set by stop(), the only way this scope is cancelled
            if reason is StopReason.TIMEOUT:
                return self._fail(held, cls, task, "timeout", None, ctx)
            if reason is StopReason.RELEASE:
                return self.release(held)
            return None  # cancelled or lease lost: another owner, or no row, decides
        if error is not None:
            if isinstance(error, GiveUp):
                log.warning("job_gave_up", job_id=str(held.id), kind=held.kind,
                            reason=error.reason)
                ok, carry = _encode(ctx.carry, "carry", held)
                return Settlement(held.id, held.run_no, Action.KILL, note=_note(error.reason),
                                  attachment=self._attachment(ctx, held), set_carry=ok,
                                  carry=carry, successor=self.successor(cls, held))
            return self._fail(held, cls, task, classify(error), error, ctx)
        return self._finished(held, cls, ctx, result)

    def _attachment(self, ctx: Context, held: Held) -> str | None:
        return _encode(ctx.attachment, "attachment", held)[1]

    def _fail(self, held: Held, cls: type[Task], task: Task, note: str,
              error: BaseException | None, ctx: Context) -> Settlement:
        failures = held.record.failure_count + 1
        try:
            delay = task.backoff(failures)
            if not isinstance(delay, dt.timedelta) or delay < dt.timedelta(0):
                raise TypeError("backoff() must return a non-negative timedelta")
        except Exception as exc:
            log.error("backoff_failed", job_id=str(held.id), kind=held.kind,
                      traceback=format_traceback(exc))
            delay = Task.backoff(task, failures)
        log.warning("job_failed", job_id=str(held.id), kind=held.kind, run_no=held.run_no,
                    failures=failures, max_failures=held.record.max_failures, error=note,
                    traceback=None if error is None else format_traceback(error))
        ok, carry = _encode(held.carry, "carry", held)
        # What the run attached before it failed is evidence of that run, kept as a
        # completed run's is (a Django task's result reads its attempts from it).
        return Settlement(held.id, held.run_no, Action.FAIL, note=note, delay=delay,
                          attachment=self._attachment(ctx, held), set_carry=ok, carry=carry,
                          successor=self.successor(cls, held))

    def _finished(self, held: Held, cls: type[Task], ctx: Context, result: Any) -> Settlement:
        if result is None or isinstance(result, str):
            return Settlement(held.id, held.run_no, Action.COMPLETE, note=_note(result),
                              attachment=self._attachment(ctx, held),
                              successor=self.successor(cls, held), result=ctx.result_json)
        if isinstance(result, Pause):
            carry_value = result.carry if result.has_carry else ctx.carry
            ok, carry = _encode(carry_value, "carry", held)
            return Settlement(held.id, held.run_no, Action.PAUSE, delay=result.resume_in,
                              attachment=self._attachment(ctx, held), set_carry=ok, carry=carry)
        log.warning("job_bad_return", job_id=str(held.id), kind=held.kind,
                    returned=type(result).__name__)
        ok, carry = _encode(ctx.carry, "carry", held)
        task = cls.__new__(cls)
        return Settlement(held.id, held.run_no, Action.FAIL, note="bad-return-type",
                          delay=Task.backoff(task, held.record.failure_count + 1),
                          set_carry=ok, carry=carry, successor=self.successor(cls, held))
