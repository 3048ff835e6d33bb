"""Awaiting a job's result: what ``Queue.result`` waits on, and what it returns.

docs/concepts/results.md. Every statement that finishes jobs (a settle that completes
or kills, a recovery that kills, a cancel) sends their ids on the queue's results
channel in its own transaction, so the notification arrives after the row is
committed; a settle announces only the jobs someone waits for, which the waiter's
read (``Store.watch_job``) flags. A waiter never polls: it reads its job once LISTEN is
active, and again only when a notification names it or when the LISTEN connection came back after
being lost (notifications sent meanwhile are gone, so every waiter re-reads).
Reading after LISTEN is active is what makes a job that finished before the call,
or between the call and the notification, come out right.

One :class:`Waiters` per Queue shares one LISTEN session among all of its pending
``result()`` calls; the session is opened by the first and closed ``LINGER`` seconds
after the last has left, unless another call came meanwhile: a caller awaiting jobs
one after another (a script, a request handler per job) pays for opening a session
once, not once per call. ``venturi/thread_results.py`` does the same for
``SyncQueue.result``'s threads: one listener thread per SyncQueue owns the session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from .errors import DatabaseUnavailable, JobCancelled, JobFailed
from .logs import get_logger
from .notices import parse_finished
from .store.base import JobRecord, JournalRecord, Outcome, Status, Store

log = get_logger("venturi.results")

_RETRY_FIRST = 0.05
_RETRY_MAX = 5.0
# Seconds the LISTEN session stays open with nobody waiting: opening one (a connection
# and its LISTEN) costs a few milliseconds, more than the wait it serves.
LINGER = 2.0


def outcome(id: UUID, job: JobRecord | None, journal: list[JournalRecord]) -> Any:
    """A finished job's result, or the exception that says why there is none: the
    decision ``Queue.result`` and ``SyncQueue.result`` share. ``journal`` is read
    only for a dead job (its last ``dead`` entry's note is the reason)."""
    if job is None:
        raise JobCancelled(id)
    if job.status is Status.COMPLETED:
        return job.result
    if job.status is Status.DEAD:
        reason = next((e.note for e in reversed(journal) if e.outcome is Outcome.DEAD), None)
        raise JobFailed(id, reason)
    raise AssertionError(f"job {id} is not finished ({job.status})")


def finished(job: JobRecord | None) -> bool:
    """Whether a waiter is done with this row: the job is gone or terminal."""
    return job is None or job.status.terminal


class Waiters:
    """The pending ``result()`` calls of one store, and the LISTEN session they share.

    ``relistened`` counts the sessions opened after a lost one, ``opened`` every
    session opened (test signals)."""

    def __init__(self, store: Store, *,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 linger: float = LINGER) -> None:
        self._store = store
        self._sleep = sleep
        self._linger = linger
        self._idle: asyncio.TimerHandle | None = None  # the close after the last waiter
        self._events: dict[UUID, set[asyncio.Event]] = {}
        self._live = asyncio.Event()  # set while LISTEN is active
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._closings = 0  # close() calls so far: a call that saw fewer was closed on
        self.relistened = 0
        self.opened = 0

    async def wait(self, id: UUID) -> JobRecord | None:
        """The job's row once it is finished (None: it no longer exists). The caller
        bounds the wait (``asyncio.timeout``)."""
        event = asyncio.Event()
        self._events.setdefault(id, set()).add(event)
        closings = self._closings
        try:
            self._start()
            while True:
                await self._live.wait()
                if self._closings != closings:
                    raise DatabaseUnavailable(
                        f"the queue was closed while a result() call waited for job {id}")
                if self._error is not None:
                    raise self._error
                # Cleared before the read: a notification or a re-listen from here on
                # sets it again, and the loop reads once more.
                event.clear()
                # Flagged as awaited in the same statement: only such jobs are announced
                # by the settle that finishes them (sql/0009_awaited.sql).
                job = await self._store.watch_job(id)
                if finished(job):
                    return job
                await event.wait()
        finally:
            waiting = self._events.get(id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._events[id]
            if not self._events:
                self._close_later()

    def _close_later(self) -> None:
        """Close the session once it has had nobody to serve for ``linger`` seconds."""
        if self._task is None or self._task.done() or self._error is not None:
            # Nothing to keep, or a session that failed: the next call starts afresh.
            self._stop_listening()
            return
        if self._idle is None:
            self._idle = asyncio.get_running_loop().call_later(self._linger, self._idle_out)

    def _idle_out(self) -> None:
        self._idle = None
        if not self._events:
            self._stop_listening()

    def _stop_listening(self) -> None:
        """Cancel the session's task without waiting for it (``close`` waits)."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        task, self._task = self._task, None
        self._live.clear()
        if task is not None and not task.done():
            task.cancel()

    def _start(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._task is None or self._task.done():
            self._error = None
            self._live.clear()  # set by a close() that woke the calls it ended
            self._task = asyncio.get_running_loop().create_task(
                self._listen(), name="venturi-results-listener")

    async def close(self) -> None:
        """Stop listening now, and wait until the session is closed; calls still
        waiting raise ``DatabaseUnavailable`` at once, as ``SyncQueue``'s do, rather
        than wait out their timeout (or for ever, without one). The next ``wait``
        starts again."""
        task = self._task
        self._stop_listening()
        self._closings += 1
        if self._events:
            # Wakes every call where it waits: for LISTEN to be active, or for its job.
            self._live.set()
            self._wake_all()
        if task is not None:
            # asyncio.wait, not an await with CancelledError suppressed: that could not
            # tell the session's cancel from the caller's, and swallowed the caller's.
            await asyncio.wait([task])
            if not task.cancelled():
                task.exception()  # retrieved: the session logs its own errors

    def _wake_all(self) -> None:
        for events in self._events.values():
            for event in events:
                event.set()

    async def _listen(self) -> None:
        delay = _RETRY_FIRST
        sessions = 0
        while True:
            try:
                async with self._store.listen_finished() as listener:
                    if sessions:
                        self.relistened += 1
                        log.info("results_relistened")
                    sessions += 1
                    self.opened += 1
                    delay = _RETRY_FIRST
                    self._live.set()
                    # Whatever finished while nobody listened was announced to no one.
                    self._wake_all()
                    while True:
                        label, payload = await listener.receive()
                        if label != "finished":
                            continue
                        for id in parse_finished(payload):
                            for event in self._events.get(id, ()):
                                event.set()
            except DatabaseUnavailable:
                self._live.clear()
                log.warning("results_listen_lost", retry_in=delay)
                await self._sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
            except Exception as exc:
                # Not transient (no LISTEN through a pooler, the tables missing): every
                # waiter raises it rather than wait for a session that will not come.
                self._error = exc
                self._live.set()
                self._wake_all()
                return
