"""The worker's slots: ``concurrency`` loops that take claimed jobs from the buffer,
run each through the executor and queue its settlement.

A job taken while the worker drains is released without running (docs/concepts/
lifecycle.md: ``released`` is no failure). A run that ends without a settlement (its
claim was lost, the job cancelled) is let go and settles nothing.
"""

from __future__ import annotations

import asyncio
import time

import anyio

from .claimer import Claimer, ClaimWindow
from .executor import Executor
from .held import HeldJobs, HeldState
from .metrics import KindMetrics
from .settler import Settler


class Slots:
    def __init__(self, concurrency: int, window: ClaimWindow, held: HeldJobs,
                 executor: Executor, settler: Settler, claimer: Claimer,
                 kinds: dict[str, KindMetrics], stop: asyncio.Event) -> None:
        self._concurrency = concurrency
        self._overlap = window.overlap
        self._held = held
        self._executor = executor
        self._settler = settler
        self._claimer = claimer
        self._kinds = kinds
        self._stop = stop  # set: the worker drains

    def start(self, group: anyio.abc.TaskGroup) -> None:
        for _ in range(self._concurrency):
            group.start_soon(self._slot)

    def release_buffered(self) -> None:
        """Release every job still waiting for a slot (the drain's first step)."""
        held_jobs, inbox = self._held, self._held.inbox
        while not inbox.empty():
            held = inbox.get_nowait()
            if held_jobs.holds(held):
                held_jobs.settling(held)
                self._settler.put(self._executor.release(held))

    async def _slot(self) -> None:
        executor, settler, kinds = self._executor, self._settler, self._kinds
        held_jobs = self._held
        inbox = held_jobs.inbox
        overlap, wants_turn, stop = self._overlap, self._claimer.wants_turn, self._stop
        while True:
            held = await inbox.get()
            if overlap and wants_turn():
                await asyncio.sleep(0)  # let the claimer send the next claim first
            if not held_jobs.holds(held):
                continue  # cancelled or lost while buffered
            if stop.is_set():
                held_jobs.settling(held)
                settler.put(executor.release(held))
                continue
            held.state = HeldState.RUNNING
            settlement = await executor.execute(held)
            elapsed = time.monotonic() - held.started if held.started else 0.0
            kinds[held.kind].run.observe(elapsed)
            if settlement is None:
                held_jobs.abandon(held)
            else:
                held_jobs.settling(held)
                settler.put(settlement)
