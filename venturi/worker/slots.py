"""The worker's slots: ``concurrency`` loops that take claimed jobs from the buffer,
run each through the executor and queue its settlement.

While a claim is out, a slot lets the event loop run every few jobs even when the jobs
themselves never await: the claim's rows are taken in when they arrive, and its round
trip, which sizes the prefetch window (``prefetch.py``), is measured as it is.

A job taken while the worker drains is released without running (docs/concepts/
lifecycle.md: ``released`` is no failure). A run that ends without a settlement (its
claim was lost, the job cancelled) is let go and settles nothing.
"""

from __future__ import annotations

import asyncio
import time

import anyio

from .claimer import Claimer
from .executor import Executor
from .held import HeldJobs, HeldState
from .metrics import KindMetrics
from .prefetch import Prefetch
from .settler import Settler

YIELD_EVERY = 8  # while a claim is out: jobs a slot runs between two turns of the loop


class Slots:
    def __init__(self, concurrency: int, prefetch: Prefetch, held: HeldJobs,
                 executor: Executor, settler: Settler, claimer: Claimer,
                 kinds: dict[str, KindMetrics], stop: asyncio.Event) -> None:
        self._concurrency = concurrency
        self._prefetch = prefetch
        self._held = held
        self._executor = executor
        self._settler = settler
        self._claimer = claimer
        self._kinds = kinds
        self._stop = stop  # set: the worker drains

    async def start(self, group: anyio.abc.TaskGroup) -> None:
        """Make the slots: a task of its own, started before the first claim, that runs
        once the claim is sent (making hundreds of tasks takes milliseconds, which the
        claim's round trip covers instead of preceding)."""
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
        claimer, wants_turn, stop = self._claimer, self._claimer.wants_turn, self._stop
        ran, taken = self._prefetch.ran, 0
        while True:
            held = await inbox.get()
            if claimer.claiming:
                taken += 1
                if taken % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # the claim's rows may be in
            elif wants_turn():
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
            ran(held.kind, elapsed)
            if settlement is None:
                held_jobs.abandon(held)
            else:
                held_jobs.settling(held)
                settler.put(settlement)
