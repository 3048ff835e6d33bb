"""SyncQueue: Queue's producer, inspection and admin surface as blocking calls.

For code with no event loop: Django and Flask views, WSGI workers' threads,
scripts, the call sites of a Celery migration. It runs on a psycopg 3
connection pool (``venturi[psycopg]``), and its ``conn=`` takes a psycopg
``Connection`` or a SQLAlchemy ``Connection``/``Session``.

There is one implementation of every operation. A SyncQueue holds a
:class:`~venturi.Queue` over a PostgresStore whose driver is blocking
(``store.postgres.psycopg_driver``): the driver's ``async`` methods call
psycopg's blocking API and return without suspending, so a Queue method's
coroutine — its validation, the store's operation, its SQL, its row decoding,
all the asyncio Queue's own code — runs to its end on its first step, in the
calling thread, with no event loop (:func:`run_blocking`). A coroutine that did
suspend would be a bug; it raises instead of blocking. docs/design-notes.md
says why this design and not a second, synchronous copy of the operations.
"""

from __future__ import annotations

import datetime as dt
import functools
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar
from uuid import UUID

from . import _codec, results, thread_results
from .config import DEFAULT_PREFIX, validate_prefix
from .errors import ConfigError
from .newjob import parse_uuid as _uuid
from .queue import Queue
from .store.base import Clock, JobRecord, Status, Store
from .store.memory import MemoryStore

if TYPE_CHECKING:
    from .store.postgres.psycopg_driver import PsycopgDriver

P = ParamSpec("P")
T = TypeVar("T")
INSTALL_HINT = "SyncQueue needs psycopg 3 and psycopg-pool: pip install 'venturi[psycopg]'"


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, in this thread; its result.

    Raises ``RuntimeError`` if it suspends (it awaited something that is not
    ready, which nothing on a blocking driver does)."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise RuntimeError("a SyncQueue operation tried to suspend: it needs an event loop")


def _blocking(method: Callable[Concatenate[Queue, P], Coroutine[Any, Any, T]]
              ) -> Callable[Concatenate[SyncQueue, P], T]:
    """``Queue.<method>`` as a blocking method of SyncQueue: same arguments, same result."""

    @functools.wraps(method)
    def call(self: SyncQueue, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if self._serial is None:
            return run_blocking(method(self.queue, *args, **kwargs))
        with self._serial:
            return run_blocking(method(self.queue, *args, **kwargs))

    call.__qualname__ = f"SyncQueue.{method.__name__}"
    return call


class SyncQueue:
    """A blocking handle on one queue. Safe to share between threads.

    Open one with ``with SyncQueue.connect(dsn) as queue`` (PostgreSQL, through a
    psycopg pool) or ``SyncQueue(MemoryStore())`` in tests. Each method takes the
    arguments of the :class:`~venturi.Queue` method of the same name and returns
    what it returns; ``conn=`` takes a psycopg ``Connection`` or a SQLAlchemy
    ``Connection``/``Session`` and joins its open transaction
    (docs/integrations/producers.md).
    """

    def __init__(self, store: Store, *,
                 max_payload_bytes: int = _codec.DEFAULT_MAX_PAYLOAD_BYTES) -> None:
        self.queue = Queue(store, max_payload_bytes=max_payload_bytes)
        # MemoryStore's operations are atomic under one event loop, not across
        # threads: a SyncQueue on one runs its calls one at a time.
        self._serial = threading.Lock() if isinstance(store, MemoryStore) else None
        self._results = self._waiters()

    @property
    def store(self) -> Store:
        return self.queue.store

    @property
    def prefix(self) -> str:
        """The table prefix naming this queue (``venturi_`` by default)."""
        return self.queue.prefix

    @classmethod
    def connect(
        cls,
        dsn: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        min_size: int = 1,
        max_size: int = 10,
        clock: Clock | None = None,
        max_payload_bytes: int = _codec.DEFAULT_MAX_PAYLOAD_BYTES,
        connect_timeout: float = 10.0,
        pooler: bool = False,
        listen_dsn: str | None = None,
    ) -> SyncQueue:
        """Open a psycopg pool on ``dsn`` for the queue named by ``prefix``.

        Use it as ``with SyncQueue.connect(dsn) as queue:`` (closed on exit), or keep
        it for the life of the process (``queue = SyncQueue.connect(dsn)`` at startup,
        ``queue.close()`` at shutdown), shared by every thread. ``min_size``/``max_size``
        bound the pool (size it to the threads that enqueue at once); ``clock`` is
        for tests (``ManualClock``). ``pooler=True`` prepares no statement, for
        PgBouncer in transaction mode (as ``Queue.connect``'s); ``listen_dsn`` then
        names a direct connection to PostgreSQL for ``result()``'s LISTEN, which
        a pooler in transaction mode cannot carry (without it, ``result()`` on an
        unfinished job raises ``ConfigError``)."""
        store = _psycopg_store(dsn, prefix=prefix, min_size=min_size, max_size=max_size,
                               clock=clock, connect_timeout=connect_timeout, pooler=pooler,
                               listen_dsn=listen_dsn)
        return cls(store, max_payload_bytes=max_payload_bytes)

    def __enter__(self) -> SyncQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_pool(cls, pool: Any, *, prefix: str = DEFAULT_PREFIX, clock: Clock | None = None,
                  schema: str | None = None,
                  max_payload_bytes: int = _codec.DEFAULT_MAX_PAYLOAD_BYTES,
                  listen_dsn: str | None = None) -> SyncQueue:
        """A SyncQueue on a ``psycopg_pool.ConnectionPool`` the caller owns (and closes).
        Its connections may be in autocommit mode or not: a statement left in a
        transaction is committed when the connection goes back to the pool.
        ``result()`` listens on a connection of its own to the pool's DSN, or to
        ``listen_dsn`` (a pool behind PgBouncer in transaction mode needs it)."""
        from .store.postgres import PostgresStore

        driver = _psycopg_driver()(pool, prefix=validate_prefix(prefix), listen_dsn=listen_dsn)
        store = PostgresStore(driver, prefix=prefix, clock=clock, schema=schema)
        return cls(store, max_payload_bytes=max_payload_bytes)

    def close(self) -> None:
        """Close the results listener, the store and its pool (leaving a ``with`` block
        does this). A ``result()`` call still waiting raises ``DatabaseUnavailable``."""
        if self._results is not None:
            self._results.close()
        run_blocking(self.store.close())

    def result(self, id: UUID | str, *, timeout: dt.timedelta | float | None = None) -> Any:
        """``Queue.result``, blocking this thread: the job's result once it completed,
        else ``JobFailed`` / ``JobCancelled``, ``TimeoutError`` when ``timeout`` is up.
        Woken by a notification, never by polling: the pending calls of all threads
        share one LISTEN connection, which a thread of the SyncQueue's keeps open until
        two seconds after the last call returned (``close()`` closes it at once); if it
        is lost, every call reads its job again once it listens again
        (docs/concepts/results.md). On a MemoryStore nothing can finish the job while
        this thread blocks: it answers at once, or raises ``TimeoutError``."""
        job_id = _uuid(id)
        seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
        if seconds is not None and seconds < 0:
            raise ValueError("timeout must be >= 0")
        deadline = None if seconds is None else time.monotonic() + seconds
        # A job already finished stays so: answered at once, without listening (and so
        # even with timeout=0).
        job = self.job(job_id)
        if not results.finished(job):
            if self._results is None:
                raise TimeoutError(f"job {job_id} did not finish within the timeout")
            job = self._results.wait(job_id, deadline)
        return self._outcome(job_id, job)

    def _waiters(self) -> thread_results.ThreadWaiters | None:
        """The pending result() calls and their LISTEN session (no thread runs until a
        call waits); None on a store with no blocking LISTEN (MemoryStore)."""
        driver = getattr(self.store, "driver", None)
        if not hasattr(driver, "blocking_listener"):
            return None
        listen = self.store._q["listen_results"]  # type: ignore[attr-defined]
        return thread_results.ThreadWaiters(
            lambda: driver.blocking_listener(listen),  # type: ignore[union-attr]
            self._watch, name=f"venturi:{self.prefix}:results")

    def _watch(self, job_id: UUID) -> JobRecord | None:
        """``Store.watch_job``, serialised like the other calls."""
        if self._serial is None:
            return run_blocking(self.store.watch_job(job_id))
        with self._serial:
            return run_blocking(self.store.watch_job(job_id))

    def _outcome(self, job_id: UUID, job: JobRecord | None) -> Any:
        journal = self.journal(job_id) if job is not None and job.status is Status.DEAD else []
        return results.outcome(job_id, job, journal)

    migrate = _blocking(Queue.migrate)
    enqueue = _blocking(Queue.enqueue)
    enqueue_many = _blocking(Queue.enqueue_many)
    enqueue_workflow = _blocking(Queue.enqueue_workflow)
    workflow = _blocking(Queue.workflow)
    job = _blocking(Queue.job)
    journal = _blocking(Queue.journal)
    stats = _blocking(Queue.stats)
    detail = _blocking(Queue.detail)
    history = _blocking(Queue.history)
    dead_jobs = _blocking(Queue.dead_jobs)
    claimed_jobs = _blocking(Queue.claimed_jobs)
    periodic_jobs = _blocking(Queue.periodic_jobs)
    finished_per_minute = _blocking(Queue.finished_per_minute)
    count = _blocking(Queue.count)
    workers = _blocking(Queue.workers)
    drain = _blocking(Queue.drain)
    cancel = _blocking(Queue.cancel)
    retry = _blocking(Queue.retry)
    cleanup = _blocking(Queue.cleanup)
    pause = _blocking(Queue.pause)
    resume = _blocking(Queue.resume)
    set_limits = _blocking(Queue.set_limits)
    kinds = _blocking(Queue.kinds)


def _psycopg_driver() -> type[PsycopgDriver]:
    try:
        from .store.postgres.psycopg_driver import PsycopgDriver
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return PsycopgDriver


def _psycopg_store(dsn: str, *, prefix: str, min_size: int, max_size: int, clock: Clock | None,
                   connect_timeout: float, pooler: bool, listen_dsn: str | None) -> Store:
    validate_prefix(prefix)
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigError("no database DSN given: set --dsn or VENTURI_DSN")
    from .store.postgres import PostgresStore

    driver, schema = _psycopg_driver().connect(dsn, prefix=prefix, min_size=min_size,
                                           max_size=max_size, connect_timeout=connect_timeout,
                                           pooler=pooler, listen_dsn=listen_dsn)
    return PostgresStore(driver, prefix=prefix, clock=clock, schema=schema)
