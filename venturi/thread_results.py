"""``SyncQueue.result``'s waits: :class:`venturi.results.Waiters` for threads.

The pending ``result()`` calls of one SyncQueue, from any of its threads, share one
LISTEN session, owned by a listener thread; the rules are those of the async waiters
(docs/concepts/results.md, venturi/results.py): a call reads its job once LISTEN is
active, and again when a notification names it or the session came back after being
lost.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol
from uuid import UUID

from .errors import DatabaseUnavailable
from .notices import parse_finished
from .results import _RETRY_FIRST, _RETRY_MAX, LINGER, finished, log
from .store.base import JobRecord

# Seconds a listener thread blocks reading notifications before it looks whether it
# should stop (close, or nobody waiting for LINGER seconds): at most what close() waits.
TICK = 0.25


class BlockingSession(Protocol):
    """A blocking LISTEN session (``PsycopgDriver.blocking_listener``): connected and
    listening on ``__enter__``; ``wait`` returns the payloads that arrived within its
    timeout. A lost connection raises ``DatabaseUnavailable``."""

    def __enter__(self) -> BlockingSession: ...

    def __exit__(self, *exc: object) -> None: ...

    def wait(self, timeout: float) -> list[str]: ...


class _Session:
    """One listener thread's state, read and written under ``ThreadWaiters._lock``.
    A new one per thread: a thread told to stop may still be finishing its last
    ``wait`` while the next call starts another."""

    def __init__(self) -> None:
        self.stopping = threading.Event()  # close(): the thread's waits end at once
        self.live = False  # LISTEN active
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None


class ThreadWaiters:
    """:class:`Waiters` for threads: the pending ``SyncQueue.result()`` calls of one
    store, and the LISTEN session they share (docs/concepts/results.md).

    A daemon thread owns the session: it opens it (``listen``) for the first call,
    hands each notification's ids to the calls waiting for them, reconnects when it
    is lost (then every call reads its job again), and closes it once nobody has
    waited for ``linger`` seconds; the next call starts another. ``watch`` is
    ``Store.watch_job`` in the calling thread. In a process forked from one where
    the thread ran (gunicorn ``--preload``), the child starts its own: the parent's
    thread is not there, and its connection is the parent's.

    ``relistened`` counts the sessions opened after a lost one, ``opened`` every
    session opened (test signals)."""

    def __init__(self, listen: Callable[[], BlockingSession],
                 watch: Callable[[UUID], JobRecord | None], *, name: str = "venturi:results",
                 sleep: Callable[[float], object] | None = None,
                 linger: float = LINGER, tick: float = TICK) -> None:
        self._listen = listen
        self._watch = watch
        self._name = name
        self._sleep = sleep  # between reconnections; None: a wait that close() ends
        self._linger = linger
        self._tick = tick
        self.relistened = 0
        self.opened = 0
        self._forget()
        _ALL.add(self)

    def _forget(self) -> None:
        """No session and nobody waiting; a new lock (in a forked child, another
        thread of the parent may have held the old one when it forked)."""
        self._lock = threading.Lock()
        self._events: dict[UUID, list[threading.Event]] = {}
        self._session: _Session | None = None
        self._last_left = time.monotonic()  # when the last waiter left

    def wait(self, id: UUID, deadline: float | None) -> JobRecord | None:
        """The job's row once it is finished (None: it no longer exists); TimeoutError
        once ``deadline`` (``time.monotonic()``) has passed."""
        event = threading.Event()
        delay = _RETRY_FIRST
        with self._lock:
            self._events.setdefault(id, []).append(event)
            session = self._start()
        try:
            while True:
                with self._lock:
                    if session.error is not None:
                        raise session.error
                    if session.stopping.is_set():
                        raise DatabaseUnavailable(
                            f"the queue was closed while a result() call waited for job {id}")
                    live = session.live
                    if live:
                        # Cleared before the read: a notification or a re-listen from
                        # here on sets it again, and the loop reads once more.
                        event.clear()
                if live:
                    try:
                        # Flagged as awaited in the same statement (sql/0009_awaited.sql).
                        job = self._watch(id)
                    except DatabaseUnavailable:
                        # A pool connection the server dropped (a restart): read again
                        # soon, as no notification comes for a job not flagged (sooner
                        # if woken: by a re-listen, or close()).
                        event.wait(min(delay, _left(deadline, id)))
                        delay = min(delay * 2, _RETRY_MAX)
                        continue
                    if finished(job):
                        return job
                if not event.wait(_left(deadline, id)):
                    raise TimeoutError(f"job {id} did not finish within the timeout")
        finally:
            with self._lock:
                waiting = self._events.get(id)
                if waiting is not None and event in waiting:
                    waiting.remove(event)
                    if not waiting:
                        del self._events[id]
                if not self._events:
                    self._last_left = time.monotonic()

    def _start(self) -> _Session:
        """The running session, else a new one and its thread (under the lock)."""
        session = self._session
        if session is None:
            session = self._session = _Session()
            session.thread = threading.Thread(target=self._run, args=(session,),
                                              name=self._name, daemon=True)
            session.thread.start()
        return session

    def close(self) -> None:
        """Stop listening now, and wait (a moment at most) until the session is
        closed; calls still waiting raise ``DatabaseUnavailable``. The next ``wait``
        starts again."""
        with self._lock:
            session, self._session = self._session, None
            if session is None:
                return
            session.stopping.set()
            self._wake_all()
        thread = session.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._tick + 1.0)

    def _wake_all(self) -> None:
        for events in self._events.values():
            for event in events:
                event.set()

    def _done(self, session: _Session) -> bool:
        """Whether the thread should end: close() told it to, or nobody has waited for
        ``linger`` seconds (then the next call starts another). Under the lock."""
        if session.stopping.is_set() or self._session is not session:
            return True
        if self._events or time.monotonic() - self._last_left < self._linger:
            return False
        self._session = None
        return True

    def _run(self, session: _Session) -> None:
        delay = _RETRY_FIRST
        sessions = 0
        while True:
            try:
                with self._listen() as listener:
                    with self._lock:
                        if sessions:
                            self.relistened += 1
                            log.info("results_relistened")
                        sessions += 1
                        self.opened += 1
                        session.live = True
                        # Whatever finished while nobody listened was announced to no one.
                        self._wake_all()
                    delay = _RETRY_FIRST
                    while True:
                        payloads = listener.wait(self._tick)
                        with self._lock:
                            for payload in payloads:
                                for id in parse_finished(payload):
                                    for event in self._events.get(id, ()):
                                        event.set()
                            if self._done(session):
                                return
            except DatabaseUnavailable:
                with self._lock:
                    session.live = False
                log.warning("results_listen_lost", retry_in=delay)
                if self._sleep is None:
                    session.stopping.wait(delay)
                else:
                    self._sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
                with self._lock:
                    if self._done(session):
                        return
            except Exception as exc:
                # Not transient (no LISTEN through a pooler): every waiter raises it
                # rather than wait for a session that will not come.
                with self._lock:
                    session.error = exc
                    if self._session is session:
                        self._session = None
                    self._wake_all()
                return


def _left(deadline: float | None, id: UUID) -> float:
    """Seconds until ``deadline`` (a day at a time when there is none); TimeoutError
    once it has passed."""
    if deadline is None:
        return 86_400.0
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"job {id} did not finish within the timeout")
    return left


_ALL: weakref.WeakSet[ThreadWaiters] = weakref.WeakSet()


def _after_fork() -> None:
    """In a forked child: no listener thread runs there, and the connection the
    parent's listened on is the parent's (the child leaves it alone)."""
    for waiters in list(_ALL):
        waiters._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
