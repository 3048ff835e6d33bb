"""The worker's services when the database goes away, and when one of them has a bug
(DESIGN §4 rule 15; docs/operations/deploys.md): an outage is ridden out with a capped
backoff; any other exception stops the worker, and `venturi worker` exits non-zero."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client import CollectorRegistry, Counter
from structlog.testing import capture_logs

import venturi
from venturi import Queue, Status, WorkerConfig
from venturi.errors import ConfigError, DatabaseConflict, DatabaseUnavailable
from venturi.worker.health import DatabaseHealth, Health
from venturi.worker.slots import Slots
from venturi.worker.waker import Poller

from ..conftest import wait_for
from .conftest import ROOT, running
from .spies import Call, Stalls, gaps, record

pytestmark = pytest.mark.timeout(60)
# What the worker's services ask of the store once it runs.
# kind_controls: the kinds' rows, re-read in the background (worker/flow.py), never before
# a claim.
SERVICE_CALLS = ("claim", "settle_many", "extend_leases", "recover_stale", "heartbeat",
                 "db_now", "next_visible_at", "seed_periodic", "stats", "cleanup_exclusive",
                 "kind_controls")


class Ping(venturi.Task, kind="wsv.ping"):
    async def run(self, ctx: venturi.Context) -> str:
        return "pong"


class Hourly(venturi.Task, kind="wsv.hourly", every=dt.timedelta(hours=1)):
    async def run(self, ctx: venturi.Context) -> None:
        return None


class Waits(venturi.Task, kind="wsv.waits", lease=dt.timedelta(seconds=1)):
    started: ClassVar[asyncio.Event]

    async def run(self, ctx: venturi.Context) -> None:
        Waits.started.set()
        await asyncio.sleep(60)


def test_the_default_backoff_cap_is_five_seconds() -> None:
    assert WorkerConfig().max_backoff == dt.timedelta(seconds=5)


async def test_retries_during_an_outage_back_off_no_further_than_the_cap(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every service's store calls fail as if the database were gone. The retries back off
    (0.1 s doubling every second of outage) up to the cap, here 0.1 s: past 1 s of outage an
    uncapped retry would wait 0.2 s, and 0.4 s after 2 s. The cap is checked against a sleep of the
    loop's stalls measured meanwhile, not against the wall clock alone."""
    cap = 0.1
    down = False

    def outage() -> BaseException | None:
        return DatabaseUnavailable("injected: the database is unreachable") if down else None

    calls = {m: record(monkeypatch, pgq.store, m, fail=outage) for m in SERVICE_CALLS}
    # maintenance off: the vacuum runs on a session of its own, which the injected outage
    # of the store's calls does not reach; its successes would end the outage early.
    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=1, max_backoff=cap,
                            heartbeat_interval=0.05, maintenance=False)
    loop = asyncio.get_running_loop()
    with capture_logs() as logs:
        async with running(worker):
            async with Stalls() as stalls:
                try:
                    down, began = True, loop.time()
                    await wait_for(
                        lambda: any(c.began - began > 2.0 for c in calls["heartbeat"]),
                        timeout=20, what="the heartbeat to retry for 2 s")
                    assert not worker.health.ready and worker.health.alive
                finally:
                    down = False
            await wait_for(lambda: worker.health.ready, timeout=10, what="ready again")
            job = await pgq.enqueue(Ping())
            await wait_for(lambda: _completed(pgq, job), what="a job after the outage")
    assert [e["event"] for e in logs].count("db_unavailable") == 1
    retries: list[Call] = [c for c in calls["heartbeat"]
                           if c.error is not None and c.began - began >= 0.5]
    assert len(retries) >= 5, calls["heartbeat"]
    # A gap may hold several stalls on a loaded machine: each is allowed what the loop
    # stalled within it, as the reference measured, and 50 ms besides.
    for (a, b), gap in zip(itertools.pairwise(retries), gaps(retries), strict=True):
        allowed = cap + stalls.within(a.began, b.began) + 0.05
        assert cap * 0.95 <= gap <= allowed, (gap, allowed, gaps(retries))


async def test_a_back_off_ends_when_another_service_reaches_the_database() -> None:
    """Twenty seconds into an outage a service's next try is the cap away (here 30 s);
    another service getting through (the waker reconnecting after a network heals) ends
    that wait at once, so an idle worker claims again as the database is back, not up to
    the cap later. A drain's ``until`` still ends it with False."""
    db = DatabaseHealth(Health(), Counter("t_db_back", "", registry=CollectorRegistry()), 30.0)
    assert await db.back_off("settler")  # the outage begins: 0.1 s
    db._down_since = time.monotonic() - 20.0
    stop = asyncio.Event()
    waiting = [asyncio.create_task(db.back_off("claimer", until=stop)),
               asyncio.create_task(db.back_off("settler"))]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiting)
    db.recovered("waker")
    assert await asyncio.wait_for(asyncio.gather(*waiting), 2.0) == [True, True]
    assert await db.back_off("claimer")  # a new outage, 0.1 s again
    stop.set()
    assert not await db.back_off("claimer", until=stop)


def _contains(error: BaseException, kind: type[BaseException], text: str) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return any(_contains(e, kind, text) for e in error.exceptions)
    return isinstance(error, kind) and text in str(error)


BUGS: list[tuple[str, list[type[venturi.Task]], dict[str, Any]]] = [
    ("claim", [Ping], {}),  # the claimer
    ("settle_many", [Ping], {}),  # the settler
    ("extend_leases", [Waits], {}),  # renewal
    ("recover_stale", [Ping], {}),  # the reaper
    ("heartbeat", [Ping], {}),
    ("next_visible_at", [Ping], {}),  # the timer
    ("seed_periodic", [Hourly], {}),
    ("cleanup_exclusive", [Ping], {"retention": {"completed": dt.timedelta(days=1)}}),
]


@pytest.mark.parametrize(("method", "tasks", "options"), BUGS, ids=[b[0] for b in BUGS])
async def test_any_other_exception_in_a_service_stops_the_worker(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch, method: str,
        tasks: list[type[venturi.Task]], options: dict[str, Any]) -> None:
    Waits.started = asyncio.Event()
    await pgq.enqueue(tasks[0]() if tasks[0] is not Hourly else Ping())
    record(monkeypatch, pgq.store, method, fail=lambda: RuntimeError(f"injected bug in {method}"))
    worker = venturi.Worker(pgq, tasks=tasks, concurrency=1, **options)
    with pytest.raises(BaseException) as stopped:
        await asyncio.wait_for(worker.run(), 10)
    assert _contains(stopped.value, RuntimeError, f"injected bug in {method}"), stopped.value
    assert not worker.health.alive


@pytest.mark.parametrize(("method", "tasks", "options"), BUGS, ids=[b[0] for b in BUGS])
async def test_a_statement_that_loses_a_race_is_tried_again_and_the_worker_goes_on(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch, method: str,
        tasks: list[type[venturi.Task]], options: dict[str, Any]) -> None:
    """A deadlock or a serialization failure (40P01, 40001: ``DatabaseConflict``) rolls
    a statement back whole, and PostgreSQL's advice is to send it again. No service
    stops the worker for one: each tries again shortly (docs/concepts/failures.md,
    "Losing the database is not a failure"). Here each service's first two statements
    lose, the third goes through, and the worker is still running, its job done (or,
    for the renewal's test, still running); a
    settle batch is sent again whole, not split into single settles."""
    Waits.started = asyncio.Event()
    losses = 2

    def lose() -> BaseException | None:
        nonlocal losses
        if losses:
            losses -= 1
            return DatabaseConflict("database conflict 40P01: deadlock detected (injected)")
        return None

    job = await pgq.enqueue(tasks[0]() if tasks[0] is not Hourly else Ping())
    calls = record(monkeypatch, pgq.store, method, fail=lose)
    worker = venturi.Worker(pgq, tasks=tasks, concurrency=1, **options)
    async with running(worker):
        await wait_for(lambda: any(c.ended is not None and c.error is None for c in calls),
                       timeout=20, what=f"{method} to go through")
        if tasks[0] is Waits:
            await asyncio.wait_for(Waits.started.wait(), 10)
        elif tasks[0] is Ping:  # (a worker of Hourly has nothing to run for an hour)
            async def done() -> bool:
                row = await pgq.job(job.id)
                return row is not None and row.status is Status.COMPLETED
            await wait_for(done, timeout=10, what="the job to complete")
        assert worker.health.alive
    assert [type(c.error) for c in calls[:3]] == [DatabaseConflict, DatabaseConflict, type(None)]
    if method == "settle_many":
        assert {tuple(s.id for s in c.args[1]) for c in calls} == {(job.id,)}


@pytest.fixture
def worker_env(pg_dsn: str, pgq: Queue) -> Iterator[dict[str, str]]:
    yield {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
           "VENTURI_DSN": pg_dsn, "VENTURI_PREFIX": pgq.prefix}


async def test_venturi_worker_exits_non_zero_on_a_bug_in_a_service(
        worker_env: dict[str, str], tmp_path: Path) -> None:
    """The CLI: a non-zero exit (a supervisor restarts it) and one line on stderr that names
    the error, not the task group that carried it; no traceback. The bug is in the claim,
    whose second call comes by the poll at the latest (a second lookup of the next delayed
    job at boot depends on whether LISTEN comes up before the timer's first one)."""
    script = Path(sys.executable).parent / "venturi"

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), "worker", "--app", "tests.worker.buggy_app", "--log-format", "json"],
            cwd=ROOT, env={**worker_env, "VENTURI_TEST_BUG": "claim"},
            capture_output=True, text=True, timeout=60)

    broken = await asyncio.to_thread(run)
    assert broken.returncode == 1, (broken.stdout, broken.stderr)
    lines = broken.stderr.strip().splitlines()
    assert lines == ["venturi: error: unexpected RuntimeError: injected bug in claim"
                     " (set VENTURI_DEBUG=1 for the traceback)"], lines
    assert "Traceback" not in broken.stderr + broken.stdout


class _HeldBack:
    """One of the store's sessions (LISTEN, the name's lock), opened only once ``gate``
    is set."""

    def __init__(self, real: Any, gate: asyncio.Event) -> None:
        self._real = real
        self._gate = gate

    async def __aenter__(self) -> Any:
        await self._gate.wait()
        return await self._real.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._real.__aexit__(*exc)


async def test_jobs_waiting_at_boot_are_claimed_before_the_listen_session_is_up(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first claim does not wait for LISTEN (whose connection is the slowest part of a
    boot): with the session held back and the poller stopped (while LISTEN is down it would
    look every second), a job enqueued before the worker started still runs. Once LISTEN is
    up, the worker claims on its notifications (waker.py)."""
    gate = asyncio.Event()
    real_listen = pgq.store.listen
    monkeypatch.setattr(pgq.store, "listen", lambda: _HeldBack(real_listen(), gate))

    async def no_polls(self: Poller) -> None:
        await asyncio.Event().wait()
    monkeypatch.setattr(Poller, "run", no_polls)
    job = await pgq.enqueue(Ping())
    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=1)
    async with running(worker, ready=False):
        await wait_for(lambda: _completed(pgq, job), timeout=10,
                       what="the job waiting at boot to complete")
        assert not worker.health.listening
        gate.set()
        await wait_for(lambda: worker.health.listening, what="LISTEN, once let through")
        second = await pgq.enqueue(Ping())
        await wait_for(lambda: _completed(pgq, second), timeout=10,
                       what="a job enqueued once LISTEN is up to complete")


async def test_the_clock_and_the_kinds_are_read_while_the_name_lock_connects(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The boot's reads that do not need the name (the database's clock, the kinds' rows)
    go out beside the name lock's session, which opens a connection of its own: here the
    lock's session opens only once the kinds are declared, which a boot that read them
    after taking the lock would wait for for ever."""
    declared = asyncio.Event()
    real_declare, real_lock = pgq.store.declare_kinds, pgq.store.identity_lock

    async def declare(*args: Any) -> Any:
        done = await real_declare(*args)
        declared.set()
        return done
    monkeypatch.setattr(pgq.store, "declare_kinds", declare)
    monkeypatch.setattr(pgq.store, "identity_lock",
                        lambda name: _HeldBack(real_lock(name), declared))
    job = await pgq.enqueue(Ping())
    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=1)
    async with running(worker, ready=False):
        await wait_for(lambda: _completed(pgq, job), timeout=10,
                       what="the job to run once the boot took the name")


class _Watched(_HeldBack):
    """The name's lock, its session held back by ``gate``: ``reached`` is set once the
    boot asks for the session, ``taken`` once ``acquire`` has taken the lock."""

    def __init__(self, real: Any, gate: asyncio.Event, reached: asyncio.Event,
                 taken: asyncio.Event) -> None:
        super().__init__(real, gate)
        self._reached = reached
        self._taken = taken

    async def __aenter__(self) -> Any:
        self._reached.set()
        lock = await super().__aenter__()
        real_acquire, taken = lock.acquire, self._taken

        async def acquire() -> bool:
            held: bool = await real_acquire()
            if held:
                taken.set()
            return held
        lock.acquire = acquire
        return lock


async def _untouched(queue: Queue, jobs: list[Any]) -> bool:
    for job in jobs:
        row = await queue.job(job.id)
        if row is None or (row.status, row.run_count) != (Status.PENDING, 0):
            return False
        if await queue.journal(job.id):
            return False
    return True


async def test_no_claim_goes_out_before_the_worker_holds_its_name(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker takes its name's lock before its first claim (docs/concepts/leases.md,
    "Restarts: boot recovery"). While another session holds the name, a worker of that
    name refuses to start and has claimed nothing. Once the name is free, with the lock's
    session held back, nothing is claimed while the boot waits at the lock (the reads
    and the claims' preparation beside it done); let through, the jobs run, and every
    claim went out with the lock held."""
    name = "wsv-named"
    jobs = [await pgq.enqueue(Ping()) for _ in range(3)]
    gate, reached, taken = asyncio.Event(), asyncio.Event(), asyncio.Event()
    claims = record(monkeypatch, pgq.store, "claim", observe=taken.is_set)
    declares = record(monkeypatch, pgq.store, "declare_kinds")
    prepares = record(monkeypatch, pgq.store, "prepare_claims")

    async with pgq.store.identity_lock(name) as elsewhere:  # the key the worker locks
        assert await elsewhere.acquire()
        with pytest.raises(ConfigError, match="held by a live worker"):
            await asyncio.wait_for(venturi.Worker(pgq, tasks=[Ping], name=name).run(), 15)
        assert claims == [] and await _untouched(pgq, jobs)

    real_lock = pgq.store.identity_lock
    monkeypatch.setattr(pgq.store, "identity_lock",
                        lambda n: _Watched(real_lock(n), gate, reached, taken))
    worker = venturi.Worker(pgq, tasks=[Ping], name=name, concurrency=3)
    before, prepared = len(declares), len(prepares)
    async with running(worker, ready=False):
        await asyncio.wait_for(reached.wait(), 10)
        await wait_for(lambda: len(declares) > before and declares[-1].ended is not None,
                       what="the kinds to be declared beside the lock's session")
        # The claim's own session is opened and its plan made meanwhile: nothing claimed.
        await wait_for(lambda: len(prepares) > prepared and prepares[-1].ended is not None,
                       what="the claims to be prepared beside the lock's session")
        assert claims == [] and await _untouched(pgq, jobs)
        gate.set()
        for job in jobs:
            await wait_for(lambda job=job: _completed(pgq, job), timeout=10,
                           what="the jobs to run once the name is held")
    assert claims and all(c.seen for c in claims), [c.seen for c in claims]


async def test_the_first_claim_is_out_before_the_slots_are_made(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Making hundreds of slot tasks takes milliseconds: they are made while the first
    claim's round trip is out, not before it is sent."""
    claiming: list[bool] = []
    real_start = Slots.start

    async def start(self: Slots, group: Any) -> None:
        claiming.append(self._claimer.claiming)
        await real_start(self, group)
    monkeypatch.setattr(Slots, "start", start)
    job = await pgq.enqueue(Ping())
    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=200)
    async with running(worker):
        await wait_for(lambda: _completed(pgq, job), timeout=10, what="the job to run")
    assert claiming == [True]


async def _completed(queue: Queue, job: Any) -> bool:
    row = await queue.job(job.id)
    return row is not None and row.status is Status.COMPLETED


def test_importing_the_worker_imports_what_its_first_start_would() -> None:
    """anyio's asyncio backend comes with the worker's code, not inside a process's first
    Worker start (about 30 ms there: benchmarks/results-throughput.md, "Boot: the claim
    session")."""
    code = ("import sys; from venturi import Worker; "
            "print('anyio._backends._asyncio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "True", out.stderr


async def test_a_boot_tried_again_leaves_no_step_of_the_last_try_running(
        pgq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps beside the name lock run together; when one fails on the database (the
    clock read, here), the boot tries again from the start, and the other (the claims'
    preparation, held up here) is cancelled rather than left running beside the next try."""
    real_now, real_prepare = pgq.store.db_now, pgq.store.prepare_claims
    reads, outcomes = [0], []

    async def db_now() -> Any:
        reads[0] += 1
        if reads[0] == 1:
            await asyncio.sleep(0)  # the preparation is under way
            raise DatabaseUnavailable("injected: the clock read failed")
        return await real_now()

    async def prepare(request: Any) -> None:
        if not outcomes:
            outcomes.append("held")
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                outcomes[0] = "cancelled"
                raise
        await real_prepare(request)

    monkeypatch.setattr(pgq.store, "db_now", db_now)
    monkeypatch.setattr(pgq.store, "prepare_claims", prepare)
    job = await pgq.enqueue(Ping())
    worker = venturi.Worker(pgq, tasks=[Ping], concurrency=1)
    async with running(worker):
        await wait_for(lambda: _completed(pgq, job), timeout=10, what="the job to run")
    assert reads[0] >= 2 and outcomes == ["cancelled"]
