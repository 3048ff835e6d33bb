"""The worker: one task group running the services of one process, and its drain.

Every service lives in a module of its own and takes only what it uses (the store, a
clock, the outage helper, the held claims, the event it sets); this module builds
them, starts them, and stops them in two phases (docs/operations/deploys.md): stop
claiming and let running jobs finish within the grace period, then release the rest
(``drain.py``, a mixin of :class:`Worker`). A bug in any service ends ``run()`` with
that exception; a lost database does not (``health.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

import anyio

from ..errors import ConfigError, DatabaseUnavailable
from ..logs import get_logger
from ..queue import Queue
from ..store.base import ClaimRequest, IdentityLock, Settled, Settlement
from ..task import Task
from .claimer import Claimer
from .clock import DbClock
from .config import WorkerConfig, select_tasks
from .control import Control
from .deadlines import DeadlineWatcher, StallMonitor
from .drain import WorkerDrain
from .executor import Executor
from .flow import Flow
from .gcpolicy import young_threshold
from .health import DatabaseHealth, GaveUp, Health
from .heartbeat import Heartbeat
from .held import HeldJobs
from .http import HttpServer, require_web
from .identity import Identity, IdentityGuard, NameLock
from .metrics import QueueSampler, WorkerMetrics
from .outcomes import Outcomes, Progress
from .periodic import PeriodicSeeder
from .prefetch import Prefetch
from .recovery import Reaper, recover_earlier_boots
from .renewer import Renewer
from .retention import Retention
from .settler import Settler
from .signals import STOP_SIGNALS
from .slots import Slots
from .vacuum import Vacuum
from .waker import Poller, VisibilityTimer, Waker

log = get_logger("venturi.worker")

# anyio imports its asyncio backend when it is first used, about 30 ms of imports that a
# process's first worker paid between Worker(...) and its boot: here they are part of
# importing the worker, like the rest of its code (benchmarks/results-throughput.md,
# "Boot: the claim session"). A later anyio that moves the module imports it as before.
with contextlib.suppress(ImportError):
    importlib.import_module("anyio._backends._asyncio")

Lifespan = Callable[[], AbstractAsyncContextManager[Any]]
Service = Callable[[], Coroutine[Any, Any, None]]


class Worker(WorkerDrain):
    """Claims and runs jobs of the given tasks until drained.

    ``Worker(queue, tasks=[Embed], concurrency=10)`` or with a full
    ``config=WorkerConfig(...)``. ``await worker.run()`` returns after a clean
    drain; ``run(until_empty=True)`` once no runnable work is left.

    ``tasks`` defaults to every registered task. Keyword ``options`` are the
    fields of ``WorkerConfig`` (``concurrency``, ``kinds``, ``name``, ``grace``,
    ``retention``, ``handle_signals``, ``prefetch``, ...). ``lifespan`` is an
    async context manager factory whose value every run sees as ``ctx.state``;
    ``metrics`` a ``WorkerMetrics`` to update (one of its own by default).
    With ``http=HOST:PORT`` it serves ``/healthz``, ``/readyz`` and ``/metrics``
    (and with ``dashboard=True`` the dashboard, whose actions ``dashboard_auth``, a
    ``venturi.web.TokenAuth`` or an auth hook, allows); both need the ``web`` extra.

    After ``run()`` returns, ``exit_code`` is 0 after a clean drain and 130
    after a forced stop (a second signal). ``health.alive`` and
    ``health.ready`` are what a liveness and a readiness probe report;
    ``progress`` counts what the worker settled.
    """

    def __init__(
        self,
        queue: Queue,
        tasks: Sequence[type[Task]] | None = None,
        *,
        config: WorkerConfig | None = None,
        lifespan: Lifespan | None = None,
        metrics: WorkerMetrics | None = None,
        dashboard_auth: Any = None,
        **options: Any,
    ) -> None:
        self.config = WorkerConfig.from_options(config, options)
        if self.config.http is not None:
            require_web()  # before anything starts: name the extra, once
        self.queue = queue
        self.store = queue.store
        if self.config.listen_dsn is not None:
            # LISTEN and the identity lock need a session of their own: behind a
            # transaction pooler they must reach PostgreSQL directly.
            if not hasattr(self.store, "listen_dsn"):
                raise ConfigError("listen_dsn applies to a PostgreSQL queue only")
            self.store.listen_dsn = self.config.listen_dsn
        self.metrics = metrics or WorkerMetrics()
        self.tasks = select_tasks(tasks, self.config.kinds)
        self.leases = {k: cls.__task__.lease for k, cls in self.tasks.items()}
        self.identity = Identity(self.config.name)
        self.health = Health()
        self.http: HttpServer | None = None
        self._dashboard_auth = dashboard_auth
        self.exit_code: int | None = None
        self._lifespan = lifespan
        self._ran = False
        self._stopped = asyncio.Event()  # set when run() has returned
        self._wire()

    def _wire(self) -> None:
        """The state the services share, and the services that do not need the loop."""
        config, store = self.config, self.store
        self._shortest_lease = min(self.leases.values()).total_seconds()
        self._kind_metrics = {kind: self.metrics.for_kind(kind) for kind in self.tasks}
        self._db = DatabaseHealth(self.health, self.metrics.db_unavailable,
                                  config.max_backoff.total_seconds())
        self._clock = DbClock()
        self._claim_wanted = asyncio.Event()  # the claimer should look for work
        self._stop = asyncio.Event()  # a drain was requested: claim nothing more
        # A slot freed, the settler's buffer emptied: the claimer decides if that is
        # worth a claim (Claimer.room_freed; it is made below).
        self._held = HeldJobs(self.metrics, lambda: self._claimer.room_freed())
        self._timer = VisibilityTimer(store, list(self.tasks), self._clock, self._db,
                                      self._claim_wanted)
        self._outcomes = Outcomes(self._held, self.metrics, self._kind_metrics,
                                  self._timer.wake_at)
        self._flow = Flow(store, {k: cls.__task__.limits for k, cls in self.tasks.items()},
                          self._db, self.metrics, config.heartbeat_interval.total_seconds(),
                          self._claim_wanted.set)
        self._deadlines = DeadlineWatcher(config.concurrency)
        self._prefetch = Prefetch(config.concurrency,
                                  None if config.prefetch == "auto" else config.prefetch,
                                  time.monotonic)  # the clock of Held.started
        self._settler = Settler(store, self.identity, self._db, self._on_settled,
                                self._held.dropped, lambda: self._claimer.room_freed(),
                                self._prefetch.current_rate, lambda: self._held.active)
        self._claimer = Claimer(store, self.identity, self.leases, self._prefetch, self._held,
                                self._settler, self._timer, self._db, self._clock,
                                self._kind_metrics, self._flow, self._claim_wanted, self._stop)
        # The drain: its grace, the wait for running jobs it may shorten, a forced stop.
        self._grace = config.grace
        self._grace_scope: anyio.CancelScope | None = None
        self._grace_began = 0.0
        self._flush_scope: anyio.CancelScope | None = None
        self._force = False
        self._starting: anyio.CancelScope | None = None  # lifespan, HTTP and boot

    def _on_settled(self, batch: list[Settlement], results: list[Settled]) -> None:
        """A committed settle batch: recorded, and the budget it freed in limited kinds
        announced to the other workers (docs/concepts/flow-control.md)."""
        if self._flow.announcing:
            held = self._held.by_id
            self._flow.settled({h.kind for x in batch if (h := held.get(x.id)) is not None})
        self._outcomes.record(batch, results)

    def _kinds_changed(self, kinds: tuple[str, ...]) -> None:
        # Re-read in the background; the claimer is woken if a row changed.
        self._flow.changed(kinds)

    # --- what the worker is --------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.identity.name

    @property
    def boot_id(self) -> str:
        return self.identity.boot_id

    @property
    def claimed_by(self) -> str:
        return self.identity.claimed_by

    @property
    def draining(self) -> bool:
        return self._stop.is_set()

    @property
    def held(self) -> int:
        """Jobs this worker holds (claimed and not yet settled)."""
        return len(self._held)

    @property
    def progress(self) -> Progress:
        """Runs settled so far, by outcome, and the claims held now (read-only)."""
        return self._outcomes.progress()

    # --- run -------------------------------------------------------------------------------

    async def run(self, *, until_empty: bool = False) -> None:
        if self._ran:
            raise RuntimeError("a Worker runs once; create a new one")
        self._ran = True
        # Per-job events are DEBUG; decide once, so the hot path skips building them.
        trace = bool(getattr(log, "is_enabled_for", lambda _l: True)(logging.DEBUG))
        self._outcomes.trace = self._claimer.trace = trace
        stopped = self._stopped
        try:
            with contextlib.ExitStack() as hooks:
                if self.config.handle_signals:  # from now on, through the boot too
                    hooks.enter_context(STOP_SIGNALS.listening(self._on_signal))
                hooks.enter_context(young_threshold(self.config.gc_threshold))
                async with AsyncExitStack() as stack:
                    started = await self._start(stack)
                    if started is not None:  # None: stopped before it held a name
                        self.health.alive = True
                        log.info("worker_started", worker=self.name, boot_id=self.boot_id,
                                 kinds=sorted(self.tasks),
                                 concurrency=self.config.concurrency)
                        await self._supervise(*started, until_empty)
            if self.exit_code is None:
                self.exit_code = 0
        finally:
            was_alive = self.health.alive
            self.health.alive = False
            stopped.set()
            if was_alive:
                p = self.progress
                log.info("worker_stopped", worker=self.name, exit_code=self.exit_code,
                         completed=p.completed, retried=p.retried, dead=p.dead,
                         paused=p.paused, released=p.released)

    async def _start(self, stack: AsyncExitStack) -> tuple[IdentityLock, Executor] | None:
        """Enter the lifespan, serve HTTP, boot. None when a drain cut the boot short
        (nothing was claimed) or a forced stop cancelled the start."""
        try:
            with anyio.CancelScope() as self._starting:
                state = None
                if self._lifespan is not None:
                    state = await stack.enter_async_context(self._lifespan())
                executor = Executor(self.tasks, state, self._clock, self._deadlines.watch,
                                    result_limit=self.queue.max_payload_bytes,
                                    reader=self.queue.store)
                if self.config.http is not None:
                    self.http = HttpServer(
                        self.queue, self.health, self.metrics.registry, self.config.http,
                        dashboard=self.config.dashboard,
                        read_only=self.config.dashboard_read_only, auth=self._dashboard_auth,
                        tasks=list(self.tasks.values()))
                    stack.push_async_callback(self.http.close)
                    await self.http.start()
                lock = await self._boot(stack)
                if lock is not None:
                    return lock, executor
            return None
        finally:
            self._starting = None

    async def _boot(self, stack: AsyncExitStack) -> IdentityLock | None:
        """Take the name's lock, then recover the claims of the name's earlier boots
        (docs/concepts/leases.md, "Restarts: boot recovery"). A drain requested while the
        database is unreachable gives the boot up: None."""
        name = NameLock(self.store, self.identity, stack)

        async def clock_and_kinds() -> None:
            await self._clock.sync(self.store)
            await self._flow.declare()

        async def prepare() -> None:
            # The claim's own session opens and plans the claim, claiming nothing: a
            # cold worker's first claim paid for both (Store.prepare_claims).
            with contextlib.suppress(DatabaseUnavailable):  # the first claim will retry
                await self.store.prepare_claims(ClaimRequest(
                    self.identity.claimed_by, self.leases, 0))

        async def boot() -> None:
            # The name's lock opens a session of its own (a connection: milliseconds on
            # loopback, round trips on a far database); what does not need the name goes
            # out beside it. A failure anywhere ends them all: the boot tries again from
            # the start, and nothing of this try outlives it.
            beside = [asyncio.ensure_future(clock_and_kinds()), asyncio.ensure_future(prepare())]
            try:
                if await name.take():
                    await recover_earlier_boots(self.store, self.identity)
                await asyncio.gather(*beside)
            except BaseException:
                await _reap(beside)
                raise

        try:
            await self._db.retry("boot", boot, until=self._stop)
        except GaveUp:
            return None
        return name.lock

    async def _supervise(self, lock: IdentityLock, executor: Executor,
                         until_empty: bool) -> None:
        slots = Slots(self.config.concurrency, self._prefetch, self._held, executor,
                      self._settler, self._claimer, self._kind_metrics, self._stop)
        async with anyio.create_task_group() as services:
            async with anyio.create_task_group() as slot_group:
                # The first claim goes out before the slots are made and the services
                # take their first steps (both start when it waits for its rows), and
                # not after the waker LISTENs: it wants a claim again once it does, for
                # the notifications sent before (waker.py).
                slot_group.start_soon(slots.start, slot_group)
                for service in self._services(lock):
                    services.start_soon(service)
                self._claim_wanted.set()
                if await self._claimer.run(until_empty=until_empty):  # until a stop
                    self.request_drain(0)
                await self._shutdown(slots, slot_group)
            await self._final_flush()
            services.cancel_scope.cancel()
        with contextlib.suppress(DatabaseUnavailable), anyio.move_on_after(2):
            await self.store.forget_worker(self.name, self.boot_id)

    def _services(self, lock: IdentityLock) -> list[Service]:
        """The background services (each a coroutine function), besides the claimer
        and the slots."""
        config, store, db, tasks = self.config, self.store, self._db, list(self.tasks)
        control = Control(self._held, self.identity, self.request_drain, self._kinds_changed)
        services: list[Service] = [
            self._settler.run,
            Waker(store, tasks, self.identity, self.health, db, self.metrics, self._timer,
                  self._claim_wanted, control.handle, self._flow.woken,
                  self._flow.reconnected).run,
            self._flow.run,
            self._timer.run,
            Reaper(store, db, self._settler.flushed_after_outage, self._claim_wanted,
                   self._shortest_lease).run,
            Renewer(store, self.identity, self._held, db, self._shortest_lease,
                    self._settler.writes).run,
            Heartbeat(store, self.identity, tasks, config.concurrency, self._held, self.health,
                      self._clock, db, config.heartbeat_interval.total_seconds()).run,
            Poller(config.poll_interval.total_seconds(), self.health, self._claim_wanted,
                   self._flow.unblock).run,
            StallMonitor(self._shortest_lease).run,
            self._deadlines.run,
            PeriodicSeeder(store, list(self.tasks.values()), db,
                           config.periodic_reseed_interval.total_seconds(),
                           self._timer.recompute).run,
            IdentityGuard(lock, self.identity, db, self.request_drain).run,
        ]
        if config.retention:
            services.append(Retention(store, config.retention, db,
                                      config.retention_interval.total_seconds()).run)
        if config.vacuum_policy is not None:
            services.append(Vacuum(store, config.vacuum_policy, db).run)
        if config.http is not None:
            services.append(QueueSampler(store, self.metrics, db,
                                         config.sample_interval.total_seconds()).run)
        return services


async def _reap(tasks: Sequence[asyncio.Future[None]]) -> None:
    """Cancel ``tasks`` and wait until they have ended, their failures retrieved: the
    caller raises the first one."""
    for task in tasks:
        task.cancel()
    with anyio.CancelScope(shield=True):
        await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled():
            task.exception()
