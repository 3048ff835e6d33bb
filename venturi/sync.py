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

import functools
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from . import _codec
from .config import DEFAULT_PREFIX, validate_prefix
from .errors import ConfigError
from .queue import Queue
from .store.base import Clock, Store
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
    ) -> SyncQueue:
        """Open a psycopg pool on ``dsn`` for the queue named by ``prefix``.

        Use it as ``with SyncQueue.connect(dsn) as queue:`` (closed on exit), or keep
        it for the life of the process (``queue = SyncQueue.connect(dsn)`` at startup,
        ``queue.close()`` at shutdown), shared by every thread. ``min_size``/``max_size``
        bound the pool (size it to the threads that enqueue at once); ``clock`` is
        for tests (``ManualClock``)."""
        store = _psycopg_store(dsn, prefix=prefix, min_size=min_size, max_size=max_size,
                               clock=clock, connect_timeout=connect_timeout)
        return cls(store, max_payload_bytes=max_payload_bytes)

    def __enter__(self) -> SyncQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_pool(cls, pool: Any, *, prefix: str = DEFAULT_PREFIX, clock: Clock | None = None,
                  schema: str | None = None,
                  max_payload_bytes: int = _codec.DEFAULT_MAX_PAYLOAD_BYTES) -> SyncQueue:
        """A SyncQueue on a ``psycopg_pool.ConnectionPool`` the caller owns (and closes).
        Its connections may be in autocommit mode or not: a statement left in a
        transaction is committed when the connection goes back to the pool."""
        from .store.postgres import PostgresStore

        driver = _psycopg_driver()(pool, prefix=validate_prefix(prefix))
        store = PostgresStore(driver, prefix=prefix, clock=clock, schema=schema)
        return cls(store, max_payload_bytes=max_payload_bytes)

    def close(self) -> None:
        """Close the store and its pool (leaving a ``with`` block does this)."""
        run_blocking(self.store.close())

    migrate = _blocking(Queue.migrate)
    enqueue = _blocking(Queue.enqueue)
    enqueue_many = _blocking(Queue.enqueue_many)
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
                   connect_timeout: float) -> Store:
    validate_prefix(prefix)
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigError("no database DSN given: set --dsn or VENTURI_DSN")
    from .store.postgres import PostgresStore

    driver, schema = _psycopg_driver().connect(dsn, prefix=prefix, min_size=min_size,
                                           max_size=max_size, connect_timeout=connect_timeout)
    return PostgresStore(driver, prefix=prefix, clock=clock, schema=schema)
