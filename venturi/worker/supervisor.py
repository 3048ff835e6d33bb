"""The worker supervisor: one task group owning every service of a worker.

Services: the claimer and the slot loops that run jobs, the settler, the LISTEN
waker, the next-visible-at timer, the stale-lease reaper, lease renewal, the
heartbeat, periodic seeding, optional retention, a bounded fallback poll, an
event-loop stall monitor and (optionally) signal handling. A bug in any of
them ends ``run()`` with that exception; a lost database does not (rule 15).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

import anyio
import structlog

from ..errors import ConfigError, DatabaseUnavailable, UnknownKind
from ..queue import Queue
from ..store.base import (
    ClaimRequest,
    IdentityLock,
    JobRecord,
    Settlement,
)
from ..task import Task, registered
from .clock import DbClock
from .config import WorkerConfig
from .control import Control
from .deadlines import DeadlineWatcher, StallMonitor
from .executor import Executor
from .fairness import Fairness
from .health import DatabaseHealth, Health
from .heartbeat import Heartbeat
from .held import Held, HeldJobs, HeldState, StopReason
from .http import HealthServer
from .identity import Identity, IdentityGuard, NameLock
from .metrics import QueueSampler, WorkerMetrics
from .outcomes import Outcomes, Progress
from .periodic import PeriodicSeeder
from .recovery import Reaper, recover_earlier_boots
from .renewer import Renewer
from .retention import Retention
from .settler import Settler
from .waker import Poller, VisibilityTimer, Waker

log = structlog.get_logger("venturi.worker")

Lifespan = Callable[[], AbstractAsyncContextManager[Any]]
DURATION_FIELDS = frozenset({
    "grace", "poll_interval", "heartbeat_interval", "periodic_reseed_interval",
    "retention_interval", "max_backoff", "sample_interval"})


class Worker:
    """Claims and runs jobs of the given tasks until drained.

    ``Worker(queue, tasks=[Embed], concurrency=10)`` or with a full
    ``config=WorkerConfig(...)``. ``await worker.run()`` returns after a clean
    drain; ``run(until_empty=True)`` once no runnable work is left.

    ``tasks`` defaults to every registered task. Keyword ``options`` are the
    fields of ``WorkerConfig`` (``concurrency``, ``kinds``, ``name``, ``grace``,
    ``retention``, ``handle_signals``, ``prefetch``, ...). ``lifespan`` is an
    async context manager factory whose value every run sees as ``ctx.state``;
    ``metrics`` a ``WorkerMetrics`` to update (one of its own by default).

    After ``run()`` returns, ``exit_code`` is 0 after a clean drain and 130
    after a forced stop (a second signal). ``health.alive`` and
    ``health.ready`` are what a liveness and a readiness probe report.
    """

    def __init__(
        self,
        queue: Queue,
        tasks: Sequence[type[Task]] | None = None,
        *,
        config: WorkerConfig | None = None,
        lifespan: Lifespan | None = None,
        metrics: WorkerMetrics | None = None,
        **options: Any,
    ) -> None:
        if config is not None and options:
            raise ConfigError("pass config= or keyword options, not both")
        if "kinds" in options and options["kinds"] is not None:
            options["kinds"] = tuple(options["kinds"])
        for key, value in list(options.items()):  # durations may be given in seconds
            if key in DURATION_FIELDS and isinstance(value, int | float):
                options[key] = dt.timedelta(seconds=value)
        self.config = config or WorkerConfig(**options)
        self.queue = queue
        self.store = queue.store
        if self.config.listen_dsn is not None:
            # LISTEN and the identity lock need a session of their own: behind a
            # transaction pooler they must reach PostgreSQL directly.
            if not hasattr(self.store, "listen_dsn"):
                raise ConfigError("listen_dsn applies to a PostgreSQL queue only")
            self.store.listen_dsn = self.config.listen_dsn
        self.metrics = metrics or WorkerMetrics()
        self._lifespan = lifespan

        chosen = list(tasks) if tasks is not None else list(registered().values())
        by_kind: dict[str, type[Task]] = {}
        for cls in chosen:
            if not (isinstance(cls, type) and issubclass(cls, Task) and hasattr(cls, "__task__")):
                raise ConfigError(f"{cls!r} is not a venturi Task class")
            by_kind[cls.__task__.kind] = cls
        if self.config.kinds is not None:
            for kind in self.config.kinds:
                if kind not in by_kind:
                    raise UnknownKind(kind, list(by_kind))
            by_kind = {k: by_kind[k] for k in self.config.kinds}
        if not by_kind:
            raise ConfigError("a worker needs at least one task to run")
        self.tasks = by_kind
        self.leases = {k: cls.__task__.lease for k, cls in by_kind.items()}
        self._min_lease = min(self.leases.values()).total_seconds()

        self.identity = Identity(self.config.name)
        self.health = Health()
        self._db = DatabaseHealth(self.health, self.metrics.db_unavailable,
                                  self.config.max_backoff.total_seconds())
        self._clock = DbClock()
        self.exit_code: int | None = None

        self._claim_wanted = asyncio.Event()  # the claimer should look for work
        self._held = HeldJobs(self.metrics, self._claim_wanted)
        self._capacity = self.config.concurrency + self.config.prefetch
        # With prefetch, the next claim goes out while buffered jobs still wait: once a
        # prefetch window is free, a slot about to start a job yields to the claimer
        # first, so the claim's round trip overlaps runs instead of alternating with them.
        # The claim then leaves about `concurrency` jobs buffered: that hides a round
        # trip only when the slots are at least as many as the window (measured: +8 % at
        # concurrency 50, prefetch 50; -7 % at 10 and 40, where claims only got smaller).
        self._claiming = False
        self._claim_floor = max(1, self.config.prefetch)
        self._overlap = 0 < self.config.prefetch <= self.config.concurrency
        self._stop = asyncio.Event()
        self._stopped = asyncio.Event()  # set when run() has returned
        self._force = False
        self._flush_scope: anyio.CancelScope | None = None
        self._draining = False
        self._grace = self.config.grace
        self._grace_scope: anyio.CancelScope | None = None  # the drain's wait for running jobs
        self._grace_began = 0.0
        self._until_empty = False
        self._fairness = Fairness()
        self._deadlines = DeadlineWatcher(self._held)
        self._ran = False
        self._executor: Executor | None = None
        self._trace = False
        self._kind_metrics = {kind: self.metrics.for_kind(kind) for kind in self.tasks}
        self._timer = VisibilityTimer(self.store, list(self.tasks), self._clock, self._db,
                                      self._claim_wanted)
        self._control = Control(self._held, self.identity, self.request_drain)
        self._outcomes = Outcomes(self._held, self.metrics, self._kind_metrics,
                                  self._timer.wake_at)
        self._settler = Settler(self.store, self.identity, self._db, self._outcomes.record,
                                self._held.dropped, self._claim_wanted)
        self.http: HealthServer | None = None

    # --- identity ---------------------------------------------------------------------

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
    def progress(self) -> Progress:
        """Runs settled so far, by outcome, and the claims held now (read-only)."""
        return self._outcomes.progress()

    @property
    def draining(self) -> bool:
        return self._draining

    def _loop_time(self) -> float:
        """anyio's clock on asyncio, without anyio's per-call backend lookup."""
        return asyncio.get_running_loop().time()

    @property
    def held(self) -> int:
        """Jobs this worker holds (claimed and not yet settled)."""
        return len(self._held)

    # --- public control ---------------------------------------------------------------

    def wake(self) -> None:
        self._claim_wanted.set()

    async def drain(self, grace: dt.timedelta | float | None = None) -> None:
        """Stop claiming, let running jobs finish within ``grace``, release the
        rest, and wait until ``run()`` has returned. Idempotent."""
        self.request_drain(grace)
        if self._ran:
            await self._stopped.wait()

    def request_drain(self, grace: dt.timedelta | float | None = None) -> None:
        """Ask for a drain. A grace given while the drain already waits for running
        jobs replaces the remaining wait, counted from when that wait began."""
        if grace is not None:
            self._grace = grace if isinstance(grace, dt.timedelta) else dt.timedelta(seconds=grace)
            if self._grace_scope is not None:
                self._grace_scope.deadline = self._grace_began + self._grace.total_seconds()
        if not self._draining:
            log.info("drain_requested", worker=self.name, grace=self._grace.total_seconds())
        self._draining = True
        self.health.draining = True
        self._stop.set()
        self._claim_wanted.set()

    # --- run -----------------------------------------------------------------------------

    async def run(self, *, until_empty: bool = False) -> None:
        if self._ran:
            raise RuntimeError("a Worker runs once; create a new one")
        self._ran = True
        self._until_empty = until_empty
        # Per-job events are DEBUG; decide once, so the hot path skips building them.
        self._trace = bool(getattr(log, "is_enabled_for", lambda _l: True)(logging.DEBUG))
        self._outcomes.trace = self._trace
        stopped = self._stopped
        try:
            async with AsyncExitStack() as stack:
                state = None
                if self._lifespan is not None:
                    state = await stack.enter_async_context(self._lifespan())
                self._executor = Executor(self.tasks, state, self._clock,
                                          self._deadlines.watch)
                if self.config.http is not None:
                    self.http = HealthServer(self, self.config.http)
                    await self.http.start()
                    stack.push_async_callback(self.http.close)
                lock = await self._boot(stack)
                self.health.alive = True
                log.info("worker_started", worker=self.name, boot_id=self.boot_id,
                         kinds=sorted(self.tasks), concurrency=self.config.concurrency)
                await self._supervise(lock)
            if self.exit_code is None:
                self.exit_code = 0
        finally:
            started = self.health.alive
            self.health.alive = False
            stopped.set()
            if started:
                p = self.progress
                log.info("worker_stopped", worker=self.name, exit_code=self.exit_code,
                         completed=p.completed, retried=p.retried, dead=p.dead,
                         paused=p.paused, released=p.released)

    async def _boot(self, stack: AsyncExitStack) -> IdentityLock:
        """Take the name's lock, then recover the claims of the name's earlier boots
        (docs/concepts/leases.md, "Restarts: boot recovery")."""
        name = NameLock(self.store, self.identity, stack)

        async def boot() -> None:
            if await name.take():
                await recover_earlier_boots(self.store, self.identity)
            await self._clock.sync(self.store)

        await self._db.retry("boot", boot)
        assert name.lock is not None
        return name.lock

    async def _supervise(self, lock: IdentityLock) -> None:
        async with anyio.create_task_group() as services:
            async with anyio.create_task_group() as slots:
                for _ in range(self.config.concurrency):
                    slots.start_soon(self._slot)
                services.start_soon(self._settler.run)
                services.start_soon(Waker(
                    self.store, list(self.tasks), self.identity, self.health, self._db,
                    self.metrics, self._timer, self._claim_wanted, self._control.handle).run)
                services.start_soon(self._timer.run)
                services.start_soon(Reaper(self.store, self._db,
                                           self._settler.flushed_after_outage,
                                           self._claim_wanted, self._min_lease).run)
                services.start_soon(Renewer(self.store, self.identity, self._held, self._db,
                                            self._min_lease).run)
                services.start_soon(Heartbeat(
                    self.store, self.identity, list(self.tasks), self.config.concurrency,
                    self._held, self.health, self._clock, self._db,
                    self.config.heartbeat_interval.total_seconds()).run)
                services.start_soon(Poller(self.config.poll_interval.total_seconds(),
                                           self.health, self._claim_wanted).run)
                services.start_soon(StallMonitor(self._min_lease).run)
                services.start_soon(self._deadlines.run)
                services.start_soon(PeriodicSeeder(
                    self.store, list(self.tasks.values()), self._db,
                    self.config.periodic_reseed_interval.total_seconds(),
                    self._timer.recompute).run)
                services.start_soon(IdentityGuard(lock, self.identity, self._db,
                                                  self.request_drain).run)
                if self.config.retention:
                    services.start_soon(Retention(
                        self.store, self.config.retention, self._db,
                        self.config.retention_interval.total_seconds()).run)
                if self.config.handle_signals:
                    services.start_soon(self._signals)
                if self.config.http is not None:
                    services.start_soon(QueueSampler(
                        self.store, self.metrics, self._db,
                        self.config.sample_interval.total_seconds()).run)
                await self._claimer()  # returns when a stop is requested
                await self._shutdown(slots)
            await self._final_flush()
            services.cancel_scope.cancel()
        with contextlib.suppress(DatabaseUnavailable), anyio.move_on_after(2):
            await self.store.forget_worker(self.name, self.boot_id)

    async def _shutdown(self, slots: anyio.abc.TaskGroup) -> None:
        """Two phases: wait for running jobs up to the grace period, then release the rest."""
        self._release_buffered()
        if not self._force:
            self._grace_began = self._loop_time()
            with anyio.move_on_after(self._grace.total_seconds()) as scope:
                self._grace_scope = scope
                await self._held.idle.wait()
            self._grace_scope = None
        self._held.stop_running(StopReason.RELEASE)
        with anyio.move_on_after(2):
            await self._held.idle.wait()
        slots.cancel_scope.cancel()

    def _release_buffered(self) -> None:
        assert self._executor is not None
        inbox = self._held.inbox
        while not inbox.empty():
            held = inbox.get_nowait()
            if self._held.holds(held):
                self._settle(held, self._executor.release(held))

    async def _final_flush(self) -> None:
        timeout = 1.0 if self._force else max(5.0, self._grace.total_seconds())
        with anyio.move_on_after(timeout) as scope:
            self._flush_scope = scope  # a second signal shortens it
            await self._settler.wait_empty()
        self._flush_scope = None
        if len(self._settler):
            log.warning("settlements_unflushed", count=len(self._settler),
                        note="their jobs will be recovered when their leases expire")

    # --- claiming and running ---------------------------------------------------------------

    async def _claimer(self) -> None:
        while not self._stop.is_set():
            await self._claim_wanted.wait()
            self._claim_wanted.clear()
            if self._stop.is_set():
                return
            free = self._capacity - self._held.active
            if free <= 0:
                continue
            if free < self._claim_floor and self._held.inbox.qsize():
                continue  # the slots have buffered work: wait for a worthwhile batch
            settled_before = self._settler.written
            try:
                # The flush-first wait only exists after an outage; its stop guard costs a
                # task group per claim, so it is only set up then.
                if self._db.flush_pending and not await self._unless_stopped(
                        self._settler.flushed_after_outage):
                    return
                normal, low = self._fairness.split(free)
                self._claiming = True
                try:
                    jobs = await self.store.claim(ClaimRequest(
                        self.claimed_by, self.leases, free, reserve_normal=normal,
                        reserve_low=low))
                finally:
                    self._claiming = False
            except DatabaseUnavailable:
                if not await self._db.back_off("claimer", until=self._stop):
                    return
                self._claim_wanted.set()
                continue
            self._db.recovered("claimer")
            self._fairness.advance(len(jobs))
            if jobs:
                self._dispatch(jobs)
            if len(jobs) == free:
                self._claim_wanted.set()  # there is probably more: claim again as slots free up
            else:
                self._timer.recompute()
                quiet = settled_before == self._settler.written  # nothing committed mid-claim
                if (self._until_empty and quiet and not jobs and not len(self._held)
                        and not len(self._settler)):
                    log.info("queue_empty", worker=self.name)
                    self.request_drain(0)
                    return
                if self._until_empty and not quiet:
                    self._claim_wanted.set()

    def _dispatch(self, jobs: list[JobRecord]) -> None:
        """Hold the claimed jobs and hand them to the slots (per-batch bookkeeping)."""
        now = self._loop_time()
        wall = self._clock.now()
        deadlines = {k: (v, v.total_seconds() * 2 / 3) for k, v in self.leases.items()}
        claimed: dict[str, int] = {}
        held_map, put = self._held.by_id, self._held.inbox.put_nowait
        for job in jobs:
            kind = job.kind
            lease, ahead = deadlines[kind]
            held = Held(job, lease, now + ahead)
            held_map[job.id] = held
            claimed[kind] = claimed.get(kind, 0) + 1
            self._kind_metrics[kind].pickup.observe(
                max((wall - job.visible_at).total_seconds(), 0.0))
            if self._trace:
                log.debug("job_claimed", job_id=str(job.id), kind=kind, run_no=job.run_count)
            put(held)
        for kind, n in claimed.items():
            self._kind_metrics[kind].claimed.inc(n)
        self._held.activated(len(jobs))

    async def _unless_stopped(self, wait: Callable[[], Awaitable[None]]) -> bool:
        """Run one of the claimer's waits, cut short by a stop request: during an outage
        the flush-first wait lasts as long as the outage, and a drain must not."""
        async with anyio.create_task_group() as group:
            async def on_stop() -> None:
                await self._stop.wait()
                group.cancel_scope.cancel()

            group.start_soon(on_stop)
            await wait()
            group.cancel_scope.cancel()
            return True
        return False

    async def _slot(self) -> None:
        assert self._executor is not None
        executor = self._executor
        held_jobs = self._held
        inbox = held_jobs.inbox
        while True:
            held = await inbox.get()
            if (self._overlap and not self._claiming and self._claim_wanted.is_set()
                    and self._capacity - held_jobs.active >= self._claim_floor):
                await asyncio.sleep(0)  # let the claimer send the next claim first
            if not held_jobs.holds(held):
                continue  # cancelled or lost while buffered
            if self._draining:
                self._settle(held, executor.release(held))
                continue
            held.state = HeldState.RUNNING
            settlement = await executor.execute(held)
            elapsed = time.monotonic() - held.started if held.started else 0.0
            self._kind_metrics[held.kind].run.observe(elapsed)
            if settlement is None:
                held_jobs.abandon(held)
            else:
                self._settle(held, settlement)

    def _settle(self, held: Held, settlement: Settlement) -> None:
        self._held.settling(held)
        self._settler.put(settlement)

    # --- services -------------------------------------------------------------------------

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if not self._draining:
                    log.info("signal_received", signal=signal.Signals(signum).name,
                             action="drain")
                    self.request_drain()
                    continue
                log.warning("signal_received", signal=signal.Signals(signum).name,
                            action="stop now")
                self._force = True
                self.exit_code = 130
                if self._flush_scope is not None:
                    self._flush_scope.deadline = min(self._flush_scope.deadline,
                                                     anyio.current_time() + 1.0)
                self._held.stop_running(StopReason.RELEASE)
                return

