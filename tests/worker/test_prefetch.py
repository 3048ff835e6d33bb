"""The prefetch window (docs/concepts/leases.md, "Prefetch"): adapted by default to the
observed job rate and claim round trip, bounded so that a buffered job waits at most
about 40 ms of the slots' work (a claim's round trip when longer, up to 100 ms; while
the table has a backlog, 250 jobs up to 80 ms); fixed with ``prefetch=N``.

The policy is tested on its own with a clock the test moves (deterministic); the worker
tests check what it means with PostgreSQL: a slow kind is not claimed ahead, a second
worker gets work while the first is busy, a drain releases what was claimed ahead."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import uuid
from collections.abc import Iterable
from typing import ClassVar
from uuid import UUID

import pytest

import venturi
from venturi import Queue, Status
from venturi.errors import ConfigError
from venturi.store.base import JobRecord
from venturi.worker.held import Held, HeldJobs, HeldState
from venturi.worker.metrics import WorkerMetrics
from venturi.worker.prefetch import (
    BACKLOG_AHEAD,
    BACKLOG_BOUND,
    SLOW_TRIP_BOUND,
    WAIT_BOUND,
    ClaimWindow,
    Prefetch,
)

from ..conftest import wait_for
from .conftest import running
from .spies import Call, record

pytestmark = pytest.mark.timeout(60)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def nothing_running() -> Iterable[float]:
    return ()


def drive(p: Prefetch, clock: FakeClock, *, rate: float, rtt: float, seconds: float,
          kind: str = "k", run: float = 0.0001) -> ClaimWindow:
    """Runs end at ``rate`` per second, a claim of ``rtt`` every millisecond."""
    window = p.window(nothing_running)
    for _ in range(int(seconds * 1000)):
        for _ in range(int(rate / 1000)):
            p.ran(kind, run)
        clock.now += 0.001
        p.claimed(rtt)
        window = p.window(nothing_running)
    return window


def test_a_fresh_worker_claims_for_its_free_slots_only() -> None:
    p = Prefetch(10, None, FakeClock())
    assert p.adaptive
    assert p.window(nothing_running) == ClaimWindow(10, 1, 0, False)


def test_fast_jobs_open_the_window_by_what_the_round_trip_justifies() -> None:
    clock = FakeClock()
    p = Prefetch(10, None, clock)
    window = drive(p, clock, rate=20_000, rtt=0.001, seconds=0.5)
    assert p.pace == pytest.approx(20_000, rel=0.01)
    low = math.ceil(p.pace * p.rtt)  # runs ended during one round trip: about 20
    assert 20 <= low <= 21
    assert window == ClaimWindow(10 + 3 * low, 10 + 3 * low, low, True)
    # The next claim goes out once no more than a round trip's worth is buffered.
    assert window.claim_now(active=10 + low + 1, buffered=low + 1) == 0
    assert window.claim_now(active=10 + low, buffered=low) == 2 * low


def test_time_spent_waiting_for_a_claim_is_not_job_time() -> None:
    """Many workers on one table: each claim takes 2 ms and the slots, having run their
    jobs at 20,000 a second in 1 ms, wait out the other 1 ms with nothing to run. The
    window is sized by the 20,000 a second they run at, not the 10,000 a second that
    end on average: counted as job time, the wait would halve the window, the smaller
    claims leave the slots waiting longer still, and the window shrinks to tiny claims
    (docs/operations/sizing.md, "Many processes on one table")."""
    clock = FakeClock()
    p = Prefetch(25, None, clock)
    window = p.window(nothing_running)
    for _ in range(300):
        for _ in range(20):
            p.ran("k", 0.00005)
        clock.now += 0.002
        p.claimed(0.002, waited=0.001)
        window = p.window(nothing_running)
    assert p.pace == pytest.approx(20_000, rel=0.02)
    assert p.current_rate() == pytest.approx(10_000, rel=0.02)  # what the settler expects
    low = math.ceil(p.pace * p.rtt)  # 40 runs during one 2 ms round trip
    assert window == ClaimWindow.ahead(25, min(3 * low, int(p.pace * WAIT_BOUND)), low)
    assert window.capacity == 25 + 3 * 40  # counting the wait: 25 + 3 × 20


def test_a_wait_longer_than_the_claim_counts_only_the_claim() -> None:
    """Slots idle since before the claim went out (no work then): only the claim's own
    round trip is taken off; the rest is an idle spell, and closes the window."""
    clock = FakeClock()
    p = Prefetch(10, None, clock)
    assert drive(p, clock, rate=20_000, rtt=0.001, seconds=0.3).capacity > 10
    clock.now += 1.0
    p.claimed(0.001, waited=1.0)
    assert p.window(nothing_running) == ClaimWindow(10, 1, 0, False)


async def test_held_jobs_tell_how_long_nothing_has_been_active() -> None:
    clock = FakeClock()
    held = HeldJobs(WorkerMetrics(), lambda: None, clock)
    clock.now += 0.5
    assert held.idle_for() == pytest.approx(0.5)
    held.activated(2)
    clock.now += 1.0
    assert held.idle_for() == 0.0
    held.active -= 1  # as one settling: still one active
    assert held.idle_for() == 0.0
    held.active += 1
    for _ in range(2):
        held._deactivate()
    clock.now += 0.003
    assert held.idle_for() == pytest.approx(0.003)


def _held(n: int, state: HeldState, started: float = 0.0) -> Held:
    now = dt.datetime.now(dt.UTC)
    record = JobRecord(uuid.uuid4(), "k", {}, 1, Status.CLAIMED, now, now, now, "w", None, 1,
                       0, 25, None, None, None, False)
    return Held(record, dt.timedelta(seconds=30), 0.0, state=state, started=started)


async def test_the_oldest_running_start_is_found_past_settling_and_unstarted_jobs() -> None:
    """The claimer asks before each claim; claim order is start order (one FIFO inbox)."""
    held = HeldJobs(WorkerMetrics(), lambda: None, FakeClock())
    assert list(held.oldest_start()) == []
    for h in (_held(1, HeldState.SETTLING, 1.0),   # finished, not yet settled
              _held(2, HeldState.RUNNING),          # handed to a slot, not started yet
              _held(3, HeldState.RUNNING, 5.0),
              _held(4, HeldState.RUNNING, 6.0),
              _held(5, HeldState.BUFFERED)):
        held.by_id[h.id] = h
    assert list(held.oldest_start()) == [5.0]


def test_a_fixed_window_claims_once_the_window_is_free_or_the_buffer_empty() -> None:
    window = ClaimWindow.of(4, 3)
    assert window.claim_now(active=5, buffered=1) == 0  # 2 free: less than the window
    assert window.claim_now(active=4, buffered=1) == 3
    assert window.claim_now(active=5, buffered=0) == 2
    assert window.claim_now(active=7, buffered=0) == 0


def test_the_window_holds_no_more_than_40_ms_of_work_at_the_rate_seen() -> None:
    clock = FakeClock()
    p = Prefetch(10, None, clock)
    window = drive(p, clock, rate=5_000, rtt=0.020, seconds=0.5)  # 3 round trips: 300
    assert p.wait_bound == WAIT_BOUND == 0.040
    assert window.capacity - 10 == int(p.pace * WAIT_BOUND) <= 200


@pytest.mark.parametrize(("rtt", "bound"), [(0.060, 0.060), (0.300, SLOW_TRIP_BOUND)])
def test_a_round_trip_longer_than_40_ms_is_the_bound_up_to_100_ms(
        rtt: float, bound: float) -> None:
    """A database far away or busy: another worker could not claim a buffered job sooner
    than a round trip of its own, and a window of 40 ms of work would leave the slots
    idle for the rest of every claim. The bound is then one round trip, at most 100 ms; a
    slow kind's limit stays at 40 ms (one slow claim lifts the round trip's average)."""
    clock = FakeClock()
    p = Prefetch(10, None, clock)
    window = drive(p, clock, rate=5_000, rtt=rtt, seconds=0.5)
    assert p.wait_bound == pytest.approx(bound)
    assert window.capacity - 10 == int(p.pace * bound) > int(p.pace * WAIT_BOUND)
    p.ran("slow", 0.1)
    p.ran("slow", 0.1)  # a slow kind keeps the 40 ms bound: 10 × 40 ms / 100 ms
    assert p.window(nothing_running).capacity - 10 == int(10 * WAIT_BOUND / 0.1) == 4


def one_of_eight_processes() -> tuple[Prefetch, ClaimWindow]:
    """One of eight processes of 25 slots on one table, as benchmarks.scale_probe saw
    them: 4,000 jobs a second, claims of 35 ms. Its window, and the window before the
    next claim."""
    clock = FakeClock()
    p = Prefetch(25, None, clock)
    return p, drive(p, clock, rate=4_000, rtt=0.035, seconds=0.5)


def test_a_backlog_stretches_the_window_to_250_jobs() -> None:
    """Eight processes of 25 slots on one table, as benchmarks.scale_probe saw them: each
    runs 4,000 jobs a second, its claims take 35 ms, and 40 ms of work is 160 jobs. While
    its claims come back full the window holds 250, fewer and larger claims; the first
    claim that comes back short puts the 40 ms bound back."""
    p, window = one_of_eight_processes()
    assert window.capacity - 25 == int(p.pace * WAIT_BOUND) < 3 * math.ceil(p.pace * p.rtt)
    p.claimed(0.035, backlog=True)
    stretched = p.window(nothing_running)
    assert stretched.capacity - 25 == BACKLOG_AHEAD == 250 < int(p.pace * BACKLOG_BOUND)
    assert stretched.low == window.low  # the next claim still goes out a round trip early
    p.claimed(0.035, backlog=False)
    assert p.window(nothing_running) == window


def test_a_backlog_stretches_the_window_to_80_ms_of_work_at_most() -> None:
    """250 jobs at 2,000 a second would be 125 ms of work: the stretch stops at 80 ms."""
    clock = FakeClock()
    p = Prefetch(100, None, clock)
    drive(p, clock, rate=2_000, rtt=0.010, seconds=0.5)
    p.claimed(0.010, backlog=True)
    window = p.window(nothing_running)
    assert window.capacity - 100 == int(p.pace * BACKLOG_BOUND) < BACKLOG_AHEAD
    assert BACKLOG_BOUND == 0.080


@pytest.mark.parametrize("concurrency", [50, 200])
def test_a_backlog_leaves_a_wider_window_as_it_is(concurrency: int) -> None:
    """One fast process: 40 ms of its work is more than 250 jobs, whatever its slots (a
    window of ten rounds of 200 slots would have grown it by half, and one process pays
    for a larger window in memory and collector time)."""
    clock = FakeClock()
    p = Prefetch(concurrency, None, clock)
    window = drive(p, clock, rate=20_000, rtt=0.010, seconds=0.5)
    assert window.capacity - concurrency > BACKLOG_AHEAD
    p.claimed(0.010, backlog=True)
    assert p.window(nothing_running) == window


def test_a_slow_kind_keeps_its_40_ms_limit_through_a_backlog() -> None:
    p, _ = one_of_eight_processes()
    p.ran("slow", 0.1)
    p.ran("slow", 0.1)
    p.claimed(0.035, backlog=True)
    assert p.window(nothing_running).capacity - 25 == int(25 * WAIT_BOUND / 0.1) == 10


@pytest.mark.parametrize(("run", "ahead"), [(0.004, 100), (0.04, 10), (0.1, 4), (0.4, 1),
                                            (1.0, 0)])
def test_a_slow_kind_bounds_the_window_as_if_every_job_were_that_slow(
        run: float, ahead: int) -> None:
    """Whatever the rate: concurrency × 40 ms / the slowest kind's runs."""
    clock = FakeClock()
    p = Prefetch(10, None, clock)
    drive(p, clock, rate=50_000, rtt=0.004, seconds=0.3)
    p.ran("slow", run)
    p.ran("slow", run)
    window = p.window(nothing_running)
    assert window.capacity - 10 == ahead
    if ahead == 0:
        assert window == ClaimWindow(10, 1, 0, False)


def test_a_run_going_on_for_long_closes_the_window_before_it_ends() -> None:
    clock = FakeClock()
    p = Prefetch(4, None, clock)
    assert drive(p, clock, rate=20_000, rtt=0.001, seconds=0.3).capacity > 4
    started = clock.now
    clock.now += 0.2  # one run has been going for 200 ms: 4 × 40 ms / 200 ms < 1
    for _ in range(2000):  # while others keep the rate up
        p.ran("k", 0.0001)
    assert p.window(lambda: [started, clock.now]) == ClaimWindow(4, 1, 0, False)


def test_an_idle_spell_closes_the_window() -> None:
    """The rate is a moving average over about 50 ms: after a second without runs, the
    first claim of the next burst is for free slots only."""
    clock = FakeClock()
    p = Prefetch(10, None, clock)
    assert drive(p, clock, rate=20_000, rtt=0.001, seconds=0.3).capacity > 10
    clock.now += 1.0
    assert p.window(nothing_running) == ClaimWindow(10, 1, 0, False)


@pytest.mark.parametrize("fixed", [0, 3, 40])
def test_a_fixed_window_ignores_what_it_observes(fixed: int) -> None:
    clock = FakeClock()
    p = Prefetch(10, fixed, clock)
    assert not p.adaptive
    assert drive(p, clock, rate=20_000, rtt=0.001, seconds=0.1) == ClaimWindow.of(10, fixed)
    p.ran("slow", 10.0)
    assert p.window(nothing_running) == ClaimWindow.of(10, fixed)


def test_prefetch_is_auto_by_default_and_validated() -> None:
    assert venturi.WorkerConfig().prefetch == "auto"
    assert venturi.WorkerConfig(prefetch=0).prefetch == 0
    for bad in (-1, 10_001, "fast", 2.5, True):
        with pytest.raises(ConfigError, match="prefetch"):
            venturi.WorkerConfig(prefetch=bad)  # type: ignore[arg-type]


# --- with the worker and PostgreSQL ---------------------------------------------------------


class Quick(venturi.Task, kind="wp.quick"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Slow(venturi.Task, kind="wp.slow"):
    """100 ms a run: with two slots, 2 × 40 ms / 100 ms < 1 job may wait in the buffer."""

    async def run(self, ctx: venturi.Context) -> None:
        await asyncio.sleep(0.1)


class Gated(venturi.Task, kind="wp.gated"):
    """Runs until the test opens its gate, or for ``hold`` seconds when given."""

    started: ClassVar[list[UUID]] = []
    gate: ClassVar[asyncio.Event]
    hold: float | None = None

    async def run(self, ctx: venturi.Context) -> None:
        Gated.started.append(ctx.job_id)
        if self.hold is not None:
            await asyncio.sleep(self.hold)
        else:
            await Gated.gate.wait()


def limits(claims: list[Call]) -> list[int]:
    return [c.args[0].limit for c in claims]


async def test_the_default_worker_claims_ahead_of_its_slots_for_fast_jobs(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    claims = record(monkeypatch, pgq.store, "claim")
    await pgq.enqueue_many([Quick() for _ in range(2_000)])
    worker = venturi.Worker(pgq, tasks=[Quick], concurrency=2)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    assert max(limits(claims)) > 2, limits(claims)
    assert await pgq.count(kind="wp.quick", statuses=[Status.COMPLETED]) == 2_000


async def test_the_claimer_reports_the_slots_wait_for_each_claim(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first claim finds the worker with nothing to run since it started: the whole
    round trip is reported as waited; claims made while jobs run report less."""
    reports: list[tuple[float, float]] = []
    real = Prefetch.claimed

    def claimed(self: Prefetch, seconds: float, waited: float = 0.0, *,
                backlog: bool = False) -> None:
        reports.append((seconds, waited))
        real(self, seconds, waited, backlog=backlog)

    monkeypatch.setattr(Prefetch, "claimed", claimed)
    await pgq.enqueue_many([Quick() for _ in range(500)])
    worker = venturi.Worker(pgq, tasks=[Quick], concurrency=2)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    assert reports and reports[0][1] > 0, reports[:3]
    assert all(waited >= 0 for _, waited in reports)


class QuickLimited(venturi.Task, kind="wp.quick-limited", concurrency=1_000):
    async def run(self, ctx: venturi.Context) -> None:
        return None


async def _backlogs(pgq: Queue, monkeypatch: pytest.MonkeyPatch,
                    task: type[venturi.Task]) -> list[bool]:
    """Drain 1,000 jobs of ``task`` with two slots: what each claim told the window."""
    reports: list[bool] = []
    real = Prefetch.claimed

    def claimed(self: Prefetch, seconds: float, waited: float = 0.0, *,
                backlog: bool = False) -> None:
        reports.append(backlog)
        real(self, seconds, waited, backlog=backlog)

    monkeypatch.setattr(Prefetch, "claimed", claimed)
    await pgq.enqueue_many([task() for _ in range(1_000)])
    worker = venturi.Worker(pgq, tasks=[task], concurrency=2)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    return reports


async def test_full_claims_tell_the_window_of_a_backlog_and_the_last_ones_do_not(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    reports = await _backlogs(pgq, monkeypatch, Quick)
    assert reports[0] and not reports[-1], reports


async def test_a_limited_kind_is_never_claimed_as_a_backlog(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A limited kind's buffered jobs hold its budget (docs/concepts/flow-control.md):
    its window keeps the 40 ms bound, even while its claims come back full."""
    claims = record(monkeypatch, pgq.store, "claim_limited")
    reports = await _backlogs(pgq, monkeypatch, QuickLimited)
    assert reports and not any(reports), reports
    # ... though most came back with all they asked for.
    assert [c for c in claims if len(c.result.jobs) == c.args[0].limit > 0], limits(claims)
    assert await pgq.count(kind="wp.quick-limited", statuses=[Status.COMPLETED]) == 1_000


async def test_a_slow_kind_is_not_claimed_ahead(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    claims = record(monkeypatch, pgq.store, "claim")
    await pgq.enqueue_many([Slow() for _ in range(30)])
    worker = venturi.Worker(pgq, tasks=[Slow], concurrency=2)
    await asyncio.wait_for(worker.run(until_empty=True), 30)
    assert claims and all(n <= 2 for n in limits(claims)), limits(claims)
    assert await pgq.count(kind="wp.slow", statuses=[Status.COMPLETED]) == 30


async def test_a_second_worker_gets_work_while_the_first_is_busy(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first worker has just run fast jobs (its window is open) and knows the gated
    kind for slow: four gated jobs arrive, it claims two for its two slots and holds no
    more; the second worker, started then, runs the other two."""
    Gated.started, Gated.gate = [], asyncio.Event()
    claims = record(monkeypatch, pgq.store, "claim")
    first = venturi.Worker(pgq, tasks=[Quick, Gated], concurrency=2, poll_interval=60)
    second = venturi.Worker(pgq, tasks=[Quick, Gated], concurrency=2, poll_interval=60)
    async with running(first):
        await pgq.enqueue_many([Quick() for _ in range(2_000)])

        async def quick_done() -> bool:
            return await pgq.count(kind="wp.quick", statuses=[Status.COMPLETED]) == 2_000
        await wait_for(quick_done, timeout=30, what="the fast jobs")
        assert max(limits(claims)) > 2, limits(claims)
        known = await pgq.enqueue(Gated(hold=0.1))  # 100 ms: 2 × 40 ms / 100 ms < 1
        await wait_for(lambda: _done(pgq, known.id), what="the slow run")
        await pgq.enqueue_many([Gated() for _ in range(4)])
        await wait_for(lambda: len(Gated.started) == 3, what="two runs on the first worker")
        async with running(second):
            await wait_for(lambda: len(Gated.started) == 5 and second.held == 2,
                           what="the second worker to run the other two")
            assert first.held == 2
            Gated.gate.set()


async def _done(pgq: Queue, id: UUID) -> bool:
    job = await pgq.job(id)
    return job is not None and job.status is Status.COMPLETED


async def test_a_drain_releases_the_jobs_claimed_ahead(pgq: Queue) -> None:
    """Claimed ahead, never started: released at drain (journal ``released``, no
    failure), as running jobs past the grace are."""
    Gated.started, Gated.gate = [], asyncio.Event()
    ids = await pgq.enqueue_many([Gated() for _ in range(5)])
    worker = venturi.Worker(pgq, tasks=[Gated], concurrency=1, prefetch=2, grace=0.2)
    async with running(worker):
        await wait_for(lambda: worker.held == 3 and len(Gated.started) == 1,
                       what="one run and two buffered")
    assert worker.exit_code == 0 and worker.progress.released == 3
    for id in ids[:3]:
        job = await pgq.job(id)
        assert job is not None and job.status is Status.PENDING and job.failure_count == 0
        assert [e.outcome for e in await pgq.journal(id)] == ["released"]
    for id in ids[3:]:  # never claimed
        job = await pgq.job(id)
        assert job is not None and job.run_count == 0 and await pgq.journal(id) == []
