"""The worker's drain, in two phases (docs/operations/deploys.md): stop claiming and let
running jobs finish within the grace period, then release the rest; a second signal stops
at once (exit 130). A mixin of :class:`~venturi.Worker`, which holds the state it reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import signal

import anyio

from ..logs import get_logger
from .health import Health
from .held import HeldJobs, StopReason
from .settler import Settler
from .signals import STOP_SIGNALS
from .slots import Slots

log = get_logger("venturi.worker")


class WorkerDrain:
    """The drain and its control surface (a mixin: the worker holds the state)."""

    health: Health
    exit_code: int | None
    _held: HeldJobs
    _settler: Settler
    _claim_wanted: asyncio.Event
    _stop: asyncio.Event
    _stopped: asyncio.Event
    _ran: bool
    _grace: dt.timedelta
    _grace_scope: anyio.CancelScope | None
    _grace_began: float
    _flush_scope: anyio.CancelScope | None
    _force: bool
    _starting: anyio.CancelScope | None

    @property
    def name(self) -> str:
        raise NotImplementedError

    # --- control --------------------------------------------------------------------------

    @staticmethod
    def handling_signals() -> contextlib.AbstractContextManager[None]:
        """Handle SIGTERM and SIGINT for this process during the block, before any worker
        runs.

        A program that will run a worker with ``handle_signals=True`` (``venturi
        worker``) enters this first: a signal while it still imports, connects or
        boots then drains the worker as soon as it runs (exit 0, nothing claimed)
        instead of ending the process with Python's default handler. From the main
        thread; the previous handlers are back after the block."""
        return STOP_SIGNALS.taken()

    @staticmethod
    def cancelled_by_signal() -> contextlib.AbstractContextManager[anyio.CancelScope]:
        """A cancel scope that the first SIGTERM or SIGINT cancels, one received earlier
        in :meth:`handling_signals` included: for a wait before the worker runs, such as
        connecting to the database."""
        return STOP_SIGNALS.cancelling()

    def wake(self) -> None:
        """Look for work now (a hint, like a NOTIFY)."""
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
        if not self._stop.is_set():
            log.info("drain_requested", worker=self.name, grace=self._grace.total_seconds())
        self.health.draining = True
        self._stop.set()
        self._claim_wanted.set()

    # --- the drain ---------------------------------------------------------------------------

    async def _shutdown(self, slots: Slots, slot_group: anyio.abc.TaskGroup) -> None:
        """Two phases: wait for running jobs up to the grace period, then release the rest."""
        slots.release_buffered()
        if not self._force:
            self._grace_began = asyncio.get_running_loop().time()
            with anyio.move_on_after(self._grace.total_seconds()) as scope:
                self._grace_scope = scope
                await self._held.idle.wait()
            self._grace_scope = None
        self._held.stop_running(StopReason.RELEASE)
        with anyio.move_on_after(2):
            await self._held.idle.wait()
        slot_group.cancel_scope.cancel()

    async def _final_flush(self) -> None:
        timeout = 1.0 if self._force else max(5.0, self._grace.total_seconds())
        with anyio.move_on_after(timeout) as scope:
            self._flush_scope = scope  # a second signal shortens it
            await self._settler.wait_empty()
        self._flush_scope = None
        if len(self._settler):
            log.warning("settlements_unflushed", count=len(self._settler),
                        note="their jobs will be recovered when their leases expire")

    def _on_signal(self, signum: int) -> None:
        """SIGTERM or SIGINT: the first drains, the second stops now (exit 130)."""
        name = signal.Signals(signum).name
        if not self._stop.is_set():
            log.info("signal_received", signal=name, action="drain")
            self.request_drain()
        elif not self._force:
            log.warning("signal_received", signal=name, action="stop now")
            self._force = True
            self.exit_code = 130
            if self._starting is not None:
                self._starting.cancel()
            if self._flush_scope is not None:
                self._flush_scope.deadline = min(self._flush_scope.deadline,
                                                 anyio.current_time() + 1.0)
            self._held.stop_running(StopReason.RELEASE)
