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
import math
import os
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any
from uuid import UUID

import anyio

from .._ids import uuid7
from ..errors import ConfigError, DatabaseUnavailable, UnknownKind
from ..logs import get_logger
from ..notices import Cancel, Drain, InvalidNotice, parse_control, parse_job_notice
from ..queue import Queue
from ..store.base import (
    ClaimRequest,
    CleanupCriteria,
    IdentityLock,
    JobRecord,
    LeaseRenewal,
    NewJob,
    Outcome,
    Settled,
    Settlement,
    Status,
    WorkerInfo,
)
from ..task import Task, registered
from .config import WorkerConfig, default_name
from .executor import Executor, Held
from .fairness import Fairness
from .http import HealthServer
from .metrics import WorkerMetrics
from .periodic import next_tick
from .settler import Settler

log = get_logger("venturi.worker")

Lifespan = Callable[[], AbstractAsyncContextManager[Any]]
LISTEN_PING_INTERVAL = 10.0
DURATION_FIELDS = frozenset({
    "grace", "poll_interval", "heartbeat_interval", "periodic_reseed_interval",
    "retention_interval", "max_backoff", "sample_interval"})


class Health:
    """What ``/healthz`` and ``/readyz`` report."""

    def __init__(self) -> None:
        self.alive = False
        self.db_ok = False
        self.listening = False
        self.draining = False

    @property
    def ready(self) -> bool:
        return self.alive and self.db_ok and self.listening and not self.draining


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

        self.boot_id = secrets.token_hex(6)
        self.explicit_name = self.config.name is not None
        self.name = self.config.name or default_name()
        self.health = Health()
        self.exit_code: int | None = None

        self._held: dict[UUID, Held] = {}
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
        self._wake = asyncio.Event()
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
        self._db_offset = 0.0
        self._db_down_since: float | None = None
        self._recovering = False
        self._timer_target: float | None = None
        self._timer_changed = asyncio.Event()
        self._deadline_at = math.inf  # when the deadline watcher wakes next
        self._deadline_changed = asyncio.Event()
        self._timer_recompute = True
        self._ran = False
        self._inbox: asyncio.Queue[Held] = asyncio.Queue()
        self._active = 0  # held jobs not yet settling: buffered or running
        self._executor: Executor | None = None
        self._settler = Settler(self, self._on_settled)
        self._settled_count = 0
        self._trace = False
        self._kind_metrics = {kind: self.metrics.for_kind(kind) for kind in self.tasks}
        self.http: HealthServer | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._stats = {"completed": 0, "retried": 0, "dead": 0, "paused": 0, "released": 0}

    # --- identity ---------------------------------------------------------------------

    @property
    def claimed_by(self) -> str:
        return f"{self.name}/{self.boot_id}"

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
        self._wake.set()

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
        self._wake.set()

    # --- database health (rule 15) ---------------------------------------------------

    async def outage(self, service: str) -> None:
        """A service lost the database: log once, report not ready, back off."""
        if self._db_down_since is None:
            self._db_down_since = time.monotonic()
            log.warning("db_unavailable", service=service)
            self.metrics.db_unavailable.inc()
        self.health.db_ok = False
        self._recovering = True
        down = time.monotonic() - self._db_down_since
        await anyio.sleep(min(0.1 * 2 ** min(down, 10), self.config.max_backoff.total_seconds()))

    def recovered_from_outage(self, service: str) -> None:
        if self._db_down_since is not None:
            log.info("db_available", service=service,
                     outage_seconds=round(time.monotonic() - self._db_down_since, 3))
            self._db_down_since = None
        self.health.db_ok = True

    async def _flushed_after_outage(self) -> None:
        """Rule 15: buffered settlements go first after a reconnect."""
        if self._recovering:
            await self._settler.wait_empty()
            self._recovering = False

    # --- run -----------------------------------------------------------------------------

    async def run(self, *, until_empty: bool = False) -> None:
        if self._ran:
            raise RuntimeError("a Worker runs once; create a new one")
        self._ran = True
        self._until_empty = until_empty
        # Per-job events are DEBUG; decide once, so the hot path skips building them.
        self._trace = bool(getattr(log, "is_enabled_for", lambda _l: True)(logging.DEBUG))
        stopped = self._stopped
        try:
            async with AsyncExitStack() as stack:
                state = None
                if self._lifespan is not None:
                    state = await stack.enter_async_context(self._lifespan())
                self._executor = Executor(self.tasks, state, lambda: self._db_offset,
                                          self._watch_deadline)
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
                log.info("worker_stopped", worker=self.name, exit_code=self.exit_code,
                         **self._stats)

    async def _boot(self, stack: AsyncExitStack) -> IdentityLock:
        """Rule 9: take the name's lock, then recover our earlier boot's claims."""
        # One lock object across retries: acquire() first closes its previous session, so a
        # transient failure after the lock was taken cannot leave us locked out by ourselves.
        lock = await stack.enter_async_context(self.store.identity_lock(self.name))
        while True:
            try:
                recovered = []
                if await lock.acquire():
                    recovered = await self.store.recover_boot(self.name, self.claimed_by)
                elif self.explicit_name:
                    raise ConfigError(
                        f"worker name {self.name!r} is held by a live worker: "
                        "choose another --name or stop that worker first"
                    )
                else:
                    # Another live process has our default name (same hostname and pid,
                    # e.g. two containers sharing a hostname): run under a unique name and
                    # recover nothing, since the claims under the shared name may be live.
                    log.warning("worker_name_taken", worker=self.name)
                    self.name = f"{self.name}-{self.boot_id}"
                    lock = await stack.enter_async_context(self.store.identity_lock(self.name))
                    if not await lock.acquire():
                        raise ConfigError(f"cannot lock worker name {self.name!r}")
                now = await self.store.db_now()
                self._db_offset = (now - dt.datetime.now(dt.UTC)).total_seconds()
                break
            except DatabaseUnavailable:
                await self.outage("boot")
        self.recovered_from_outage("boot")
        for r in recovered:
            log.warning("job_recovered", job_id=str(r.id), kind=r.kind, run_no=r.run_no,
                        status=r.status.value, previous_owner=r.claimed_by,
                        reason="worker-restarted")
        return lock

    async def _supervise(self, lock: IdentityLock) -> None:
        async with anyio.create_task_group() as services:
            async with anyio.create_task_group() as slots:
                for _ in range(self.config.concurrency):
                    slots.start_soon(self._slot)
                services.start_soon(self._settler.run)
                services.start_soon(self._waker)
                services.start_soon(self._timer)
                services.start_soon(self._reaper)
                services.start_soon(self._renewer)
                services.start_soon(self._heartbeat)
                services.start_soon(self._poll)
                services.start_soon(self._stall_monitor)
                services.start_soon(self._deadline_watcher)
                services.start_soon(self._periodic)
                services.start_soon(self._guard_identity, lock)
                if self.config.retention:
                    services.start_soon(self._retention)
                if self.config.handle_signals:
                    services.start_soon(self._signals)
                if self.config.http is not None:
                    services.start_soon(self._sampler)
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
                await self._idle.wait()
            self._grace_scope = None
        for held in list(self._held.values()):
            if held.state == "running":
                held.stop("release")
        with anyio.move_on_after(2):
            await self._idle.wait()
        slots.cancel_scope.cancel()

    def _release_buffered(self) -> None:
        assert self._executor is not None
        while not self._inbox.empty():
            held = self._inbox.get_nowait()
            if self._held.get(held.id) is held:
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
            await self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            free = self._capacity - self._active
            if free <= 0:
                continue
            if free < self._claim_floor and self._inbox.qsize():
                continue  # the slots have buffered work: wait for a worthwhile batch
            settled_before = self._settled_count
            try:
                # The flush-first wait only exists after an outage; its stop guard costs a
                # task group per claim, so it is only set up then.
                if self._recovering and not await self._unless_stopped(
                        self._flushed_after_outage):
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
                if not await self._unless_stopped(lambda: self.outage("claimer")):
                    return
                self._wake.set()
                continue
            self.recovered_from_outage("claimer")
            self._fairness.advance(len(jobs))
            if jobs:
                self._dispatch(jobs)
            if len(jobs) == free:
                self._wake.set()  # there is probably more: claim again as slots free up
            else:
                self._timer_recompute = True
                self._timer_changed.set()
                quiet = settled_before == self._settled_count  # nothing committed mid-claim
                if (self._until_empty and quiet and not jobs and not self._held
                        and not len(self._settler)):
                    log.info("queue_empty", worker=self.name)
                    self.request_drain(0)
                    return
                if self._until_empty and not quiet:
                    self._wake.set()

    def _dispatch(self, jobs: list[JobRecord]) -> None:
        """Hold the claimed jobs and hand them to the slots (per-batch bookkeeping)."""
        now = self._loop_time()
        wall = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self._db_offset)
        deadlines = {k: (v, v.total_seconds() * 2 / 3) for k, v in self.leases.items()}
        claimed: dict[str, int] = {}
        held_map, put = self._held, self._inbox.put_nowait
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
        self._active += len(jobs)
        self._idle.clear()
        for kind, n in claimed.items():
            self._kind_metrics[kind].claimed.inc(n)
        self.metrics.in_flight.set(len(held_map))

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
        inbox = self._inbox
        while True:
            held = await inbox.get()
            if (self._overlap and not self._claiming and self._wake.is_set()
                    and self._capacity - self._active >= self._claim_floor):
                await asyncio.sleep(0)  # let the claimer send the next claim first
            if self._held.get(held.id) is not held:
                continue  # cancelled or lost while buffered
            if self._draining:
                self._settle(held, executor.release(held))
                continue
            held.state = "running"
            settlement = await executor.execute(held)
            elapsed = time.monotonic() - held.started if held.started else 0.0
            self._kind_metrics[held.kind].run.observe(elapsed)
            if settlement is None:
                self._abandon(held)
            else:
                self._settle(held, settlement)

    def _settle(self, held: Held, settlement: Settlement) -> None:
        if held.state != "settling":
            held.state = "settling"
            self._deactivate()
        self._settler.put(settlement)

    def _deactivate(self) -> None:
        self._active -= 1
        if self._active == 0:
            self._idle.set()
        self._wake.set()

    def _abandon(self, held: Held) -> None:
        """The run ended without a settlement: its claim was lost or the job cancelled."""
        reason = held.stop_reason or "lease-lost"
        if reason == "cancelled":
            log.info("job_cancelled", job_id=str(held.id), kind=held.kind, run_no=held.run_no)
        else:
            log.warning("lease_lost", job_id=str(held.id), kind=held.kind, run_no=held.run_no)
            self.metrics.lost.labels(held.kind).inc()
        self._forget(held.id)

    def _forget(self, id: UUID, gauge: bool = True) -> None:
        held = self._held.pop(id, None)
        if held is not None and held.state != "settling":
            held.state = "settling"
            self._deactivate()
        if gauge:
            self.metrics.in_flight.set(len(self._held))

    def settle_dropped(self, settlement: Settlement) -> None:
        """The database refused this settlement on its own (the settler logged it): stop
        holding the job; its lease expires and the reaper recovers it."""
        held = self._held.get(settlement.id)
        if held is not None and held.run_no == settlement.run_no:
            self.metrics.lost.labels(held.kind).inc()
            self._forget(settlement.id)

    def _on_settled(self, batch: list[Settlement], results: list[Settled]) -> None:
        """One committed settle batch: plain completions take the short path (counted
        per kind once per batch); everything else is logged one by one."""
        self._settled_count += len(batch)
        completed: dict[str, int] = {}
        held_map = self._held
        for settlement, result in zip(batch, results, strict=True):
            held = held_map.get(settlement.id)
            if (held is not None and result.outcome is Outcome.COMPLETED and not self._trace
                    and held.state == "settling" and held.run_no == settlement.run_no):
                completed[held.kind] = completed.get(held.kind, 0) + 1
                del held_map[settlement.id]  # state is "settling": nothing to deactivate
            else:
                self._on_settled_one(settlement, result)
        for kind, n in completed.items():
            self._kind_metrics[kind].completed.inc(n)
        self._stats["completed"] += sum(completed.values())
        self.metrics.in_flight.set(len(held_map))

    def _on_settled_one(self, settlement: Settlement, result: Settled) -> None:
        held = self._held.get(settlement.id)
        kind = held.kind if held else "?"
        if not result.applied:
            log.warning("settle_refused", job_id=str(settlement.id), kind=kind,
                        run_no=settlement.run_no, action=settlement.action.value,
                        reason="claim no longer held at this epoch")
            self.metrics.lost.labels(kind).inc()
        else:
            outcome = result.outcome
            if outcome is Outcome.COMPLETED:
                self._stats["completed"] += 1
                if held is not None:
                    self._kind_metrics[kind].completed.inc()
                if self._trace:
                    log.debug("job_completed", job_id=str(settlement.id), kind=kind,
                              run_no=settlement.run_no)
            elif outcome is Outcome.RETRIED:
                self._stats["retried"] += 1
                self.metrics.retried.labels(kind).inc()
                self._consider(dt.datetime.now(dt.UTC) + settlement.delay, db_time=False)
                log.info("job_retried", job_id=str(settlement.id), kind=kind,
                         run_no=settlement.run_no, note=settlement.note,
                         retry_in=settlement.delay.total_seconds())
            elif outcome is Outcome.DEAD:
                self._stats["dead"] += 1
                self.metrics.dead.labels(kind).inc()
                log.warning("job_dead", job_id=str(settlement.id), kind=kind,
                            run_no=settlement.run_no, note=settlement.note)
            elif outcome is Outcome.PAUSED:
                self._stats["paused"] += 1
                self.metrics.paused.labels(kind).inc()
                self._consider(dt.datetime.now(dt.UTC) + settlement.delay, db_time=False)
                log.debug("job_paused", job_id=str(settlement.id), kind=kind,
                          run_no=settlement.run_no, resume_in=settlement.delay.total_seconds())
            elif outcome is Outcome.RELEASED:
                self._stats["released"] += 1
                self.metrics.released.labels(kind).inc()
                log.info("job_released", job_id=str(settlement.id), kind=kind,
                         run_no=settlement.run_no)
        self._forget(settlement.id, gauge=False)

    # --- services -------------------------------------------------------------------------

    async def _waker(self) -> None:
        """LISTEN for new work and control messages; reconnect with backoff (rule 11)."""
        connected_before = False
        while True:
            try:
                async with self.store.listen() as listener:
                    self.health.listening = True
                    if connected_before:
                        log.info("waker_reconnected", worker=self.name)
                        self.metrics.waker_reconnects.inc()
                    connected_before = True
                    self.recovered_from_outage("waker")
                    self._timer_recompute = True
                    self._timer_changed.set()
                    self._wake.set()  # notifications may have been lost meanwhile
                    await self._listen(listener)
            except DatabaseUnavailable:
                self.health.listening = False
                await self.outage("waker")

    async def _listen(self, listener: Any) -> None:
        ping = getattr(listener, "ping", None)
        while True:
            with anyio.move_on_after(LISTEN_PING_INTERVAL) as idle:
                channel, payload = await listener.receive()
            if idle.cancelled_caught:
                if ping is not None:
                    await ping()  # a silently dead socket shows up here
                continue
            if channel == "jobs":
                self._on_job_notice(payload)
            elif channel == "control":
                self._on_control(payload)

    def _on_job_notice(self, payload: str) -> None:
        notice = parse_job_notice(payload)
        if notice.kind not in self.tasks:
            return
        if notice.due is None:
            self._wake.set()
            return
        self._consider(notice.due, db_time=True)

    def _on_control(self, payload: str) -> None:
        # Anyone who can reach the database can send these: a malformed message is
        # logged and dropped, never allowed to stop the worker.
        try:
            message = parse_control(payload)
        except InvalidNotice:
            log.warning("control_message_invalid")
            return
        if isinstance(message, Cancel):
            for id in message.ids:
                held = self._held.get(id)
                if held is None or held.state == "settling":
                    continue
                if held.state == "buffered":
                    log.info("job_cancelled", job_id=str(held.id), kind=held.kind,
                             run_no=held.run_no)
                    self._forget(held.id)
                else:
                    held.stop("cancelled")
        elif isinstance(message, Drain) and message.worker in (None, self.name):
            self.request_drain(message.grace)

    def _consider(self, when: dt.datetime, *, db_time: bool) -> None:
        """Make the timer fire at ``when`` if that is earlier than its current target."""
        local = when - dt.timedelta(seconds=self._db_offset) if db_time else when
        delay = (local - dt.datetime.now(dt.UTC)).total_seconds()
        target = anyio.current_time() + max(delay, 0.0)
        if self._timer_target is None or target < self._timer_target:
            self._timer_target = target
            self._timer_changed.set()

    async def _timer(self) -> None:
        """Wake the claimer exactly when the next delayed job becomes visible."""
        kinds = list(self.tasks)
        while True:
            if self._timer_recompute:
                self._timer_recompute = False
                try:
                    nxt = await self.store.next_visible_at(kinds)
                except DatabaseUnavailable:
                    self._timer_recompute = True
                    await self.outage("timer")
                    continue
                if nxt is not None:
                    self._consider(nxt, db_time=True)
            self._timer_changed.clear()
            timeout = None
            if self._timer_target is not None:
                timeout = max(self._timer_target - anyio.current_time(), 0.0)
            with anyio.move_on_after(timeout):
                await self._timer_changed.wait()
            if self._timer_target is not None and anyio.current_time() >= self._timer_target:
                self._timer_target = None
                self._timer_recompute = True
                self._wake.set()

    async def _reaper(self) -> None:
        """Recover expired claims of any worker: at boot, then every half of the shortest lease."""
        period = max(self._min_lease / 2, 0.2)
        while True:
            try:
                await self._flushed_after_outage()
                recovered = await self.store.recover_stale(1000)
            except DatabaseUnavailable:
                await self.outage("reaper")
                continue
            self.recovered_from_outage("reaper")
            for r in recovered:
                log.warning("job_recovered", job_id=str(r.id), kind=r.kind, run_no=r.run_no,
                            status=r.status.value, previous_owner=r.claimed_by,
                            reason="lease-expired")
            if recovered:
                self._wake.set()
                if len(recovered) == 1000:
                    continue
            await anyio.sleep(period)

    def _watch_deadline(self, due: float) -> None:
        if due < self._deadline_at:
            self._deadline_at = due
            self._deadline_changed.set()

    async def _deadline_watcher(self) -> None:
        """Stops runs at their local lease deadline or their task's timeout: one
        timer for the earliest due run, instead of a timer armed per run."""
        clock = asyncio.get_running_loop().time
        while True:
            self._deadline_changed.clear()
            now = clock()
            due = math.inf
            for held in list(self._held.values()):
                if held.state == "running" and held.scope is not None and not held.expire(now):
                    due = min(due, held.due)
            self._deadline_at = due
            with anyio.move_on_after(due - now if due < math.inf else math.inf):
                await self._deadline_changed.wait()

    async def _renewer(self) -> None:
        """Rule 8: renew every held lease about every third of it, in one statement."""
        while True:
            leases = [h.lease.total_seconds() for h in self._held.values()]
            await anyio.sleep(max(min(leases, default=self._min_lease) / 3, 0.05))
            held = [h for h in self._held.values()]
            if not held:
                continue
            sent = anyio.current_time()
            try:
                kept = await self.store.extend_leases(self.claimed_by, [
                    LeaseRenewal(h.id, h.run_no, h.lease) for h in held])
            except DatabaseUnavailable:
                await self.outage("renewer")
                continue
            self.recovered_from_outage("renewer")
            for h in held:
                if h.id in kept:
                    h.set_deadline(sent + h.lease.total_seconds() * 2 / 3)
                elif self._held.get(h.id) is h and h.state != "settling":
                    h.stop("lease-lost")
                    if h.state == "buffered":
                        self._abandon(h)

    async def _heartbeat(self) -> None:
        # Database time (boot measured the offset): this host's wall clock may be off.
        started = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self._db_offset)
        interval = self.config.heartbeat_interval.total_seconds()
        while True:
            info = WorkerInfo(
                name=self.name, boot_id=self.boot_id, host=socket.gethostname(), pid=os.getpid(),
                kinds=sorted(self.tasks), concurrency=self.config.concurrency,
                in_flight=len(self._held), started_at=started, last_seen=started,
                draining=self._draining,
            )
            try:
                await self.store.heartbeat(info)
                now = await self.store.db_now()
                self._db_offset = (now - dt.datetime.now(dt.UTC)).total_seconds()
            except DatabaseUnavailable:
                await self.outage("heartbeat")
                continue
            self.recovered_from_outage("heartbeat")
            await anyio.sleep(interval)

    async def _poll(self) -> None:
        """The bounded fallback: a NOTIFY is only a hint and can be lost."""
        while True:
            interval = self.config.poll_interval.total_seconds()
            if not self.health.listening:
                interval = min(interval, 1.0)
            await anyio.sleep(interval)
            self._wake.set()

    async def _stall_monitor(self) -> None:
        threshold = self._min_lease / 3
        tick = min(0.25, threshold / 2)
        while True:
            before = anyio.current_time()
            await anyio.sleep(tick)
            lag = anyio.current_time() - before - tick
            if lag > threshold:
                log.warning("event_loop_stalled", seconds=round(lag, 3),
                            note="a handler is blocking the event loop; leases are at risk")

    async def _periodic(self) -> None:
        """Rule 12: seed one occurrence per periodic kind (a no-op when one exists)."""
        periodic = [cls for cls in self.tasks.values() if cls.__task__.periodic]
        if not periodic:
            return
        while True:
            try:
                now = await self.store.db_now()
                jobs = []
                for cls in periodic:
                    o = cls.__task__
                    jobs.append(NewJob(id=uuid7(), kind=o.kind, payload=cls().to_json(),
                                       priority=int(o.priority), max_failures=o.max_failures,
                                       at=next_tick(o, now), periodic=True))
                if await self.store.seed_periodic(jobs):
                    self._timer_recompute = True
                    self._timer_changed.set()
            except DatabaseUnavailable:
                await self.outage("periodic")
                continue
            await anyio.sleep(self.config.periodic_reseed_interval.total_seconds())

    async def _retention(self) -> None:
        """Delete old finished jobs in bounded batches, one worker at a time."""
        while True:
            for status, age in self.config.retention.items():
                try:
                    cutoff = await self.store.db_now() - age
                    while True:
                        n = await self.store.cleanup_exclusive(CleanupCriteria(
                            cutoff, status=Status(status), batch_size=10_000))
                        if n:
                            log.info("retention_deleted", status=status, count=n)
                        if n is None or n < 10_000:
                            break
                except DatabaseUnavailable:
                    await self.outage("retention")
            await anyio.sleep(self.config.retention_interval.total_seconds())

    async def _sampler(self) -> None:
        """Queue depth and lag for /metrics, sampled on a timer so scrapes cost no queries."""
        seen: set[str] = set()
        while True:
            try:
                snap = await self.store.stats()
            except DatabaseUnavailable:
                await self.outage("sampler")
                continue
            kinds = set(snap.pending_by_kind) | set(snap.oldest_pending_age) | seen
            for kind in kinds:
                self.metrics.queue_depth.labels(kind).set(snap.pending_by_kind.get(kind, 0))
                age = snap.oldest_pending_age.get(kind)
                self.metrics.oldest_runnable.labels(kind).set(age.total_seconds() if age else 0)
            seen = kinds
            await anyio.sleep(self.config.sample_interval.total_seconds())

    async def _guard_identity(self, lock: IdentityLock) -> None:
        """Rule 9: re-take the name's lock after a reconnect; drain if someone else has it."""
        while True:
            while not lock.lost.is_set():
                with anyio.move_on_after(LISTEN_PING_INTERVAL):
                    await lock.lost.wait()
                if not lock.lost.is_set():
                    await lock.ping()  # a silently dead session shows up here
            log.warning("identity_lock_lost", worker=self.name)
            while True:
                try:
                    got = await lock.acquire()
                    break
                except DatabaseUnavailable:
                    await self.outage("identity")
            self.recovered_from_outage("identity")
            if not got:
                log.error("identity_taken", worker=self.name,
                          note="another worker holds this name; draining")
                self.request_drain()
                return

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
                for held in list(self._held.values()):
                    if held.state == "running":
                        held.stop("release")
                return

