"""Worker scenarios: drain, pickup latency, backlog and memory, beside raw loops.

The drain, slots and pickup scenarios run the ``Worker`` with the library's defaults
both in this process (its own task group on the benchmark's event loop, nothing else
running) and in a child process of its own (:mod:`benchmarks.workerproc`), as a
deployment runs it; memory runs it in child processes (scale-out: ``scaleout.py``). The raw
references (:mod:`benchmarks.raw`) work on a migrated prefix of the same shape,
without a journal, and are measured in the same runs, taking turns with venturi.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import json
import math
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import orjson

from venturi import Queue, Worker, logs
from venturi._ids import uuid7_many

from ..explain import Statement, _id, explain
from ..harness import Bench, Figure, bulk_load, scenario, truncate
from ..raw import INSERT_NOTIFY, RawConsumer, drain_on
from ..tasks import (
    KIND,
    PROBE_KIND,
    SLEEP,
    SLEEPY_KIND,
    STARTED,
    Noop,
    Probe,
    Sleepy,
    Starts,
    payload,
)

RAW_KIND = "bench.raw"
COLUMNS = ["id", "kind", "payload", "priority", "max_failures"]
ROOT = Path(__file__).resolve().parents[2]
LEASE = dt.timedelta(seconds=30)
PICKUP_SAMPLES = 3  # the pickup scenario's samples per contender, × the size's ``pickup``
PICKUP_WARMUP = 20  # pickup pairs run first and not counted (each consumer's first claims)


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Warnings only while a scenario runs (per-job events are DEBUG anyway, and a
    production worker logs at INFO: a few lines per drain); restored afterwards."""
    logs.configure("json", level="warning")
    try:
        yield
    finally:
        logs.reset()


async def fill(conn: asyncpg.Connection, prefix: str, n: int, kind: str = KIND) -> None:
    """``n`` runnable jobs by COPY (not timed): the same rows in every table."""
    ids = uuid7_many(n)
    await conn.copy_records_to_table(
        f"{prefix}jobs", columns=COLUMNS,
        records=((ids[i], kind, orjson.dumps(payload(i)).decode(), 1, 25) for i in range(n)))


async def worker_drain(queue: Queue, concurrency: int, prefetch: int | None = None,
                       task: type[Noop] | type[Sleepy] = Noop) -> None:
    """Defaults but for the concurrency; ``prefetch`` only when given."""
    options = {} if prefetch is None else {"prefetch": prefetch}
    await Worker(queue, tasks=[task], concurrency=concurrency,
                 **options).run(until_empty=True)


Drain = Callable[[], Awaitable[object]]


async def take_turns(bench: Bench, conn: asyncpg.Connection,
                     contenders: dict[str, tuple[str, int, str, Drain]],
                     *, clean: bool = True) -> dict[str, list[float]]:
    """Each run: every contender in turn (the order rotates between runs) gets its
    table filled with its jobs, untimed, then drains it, timed (a drain returning a float
    has timed itself, and that is what counts). ``contenders`` maps
    a name to (prefix, jobs, kind, drain). With ``clean`` the table is emptied first;
    without, it is vacuumed instead: earlier drains leave dead entries at the head of the
    claim index that every claim steps over until autovacuum reaches the table (at 20 %
    of a million rows: rarely), and the comparison is about the rows the table holds."""
    names = list(contenders)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    for run in range(bench.size.runs):
        for name in names[run % len(names):] + names[:run % len(names)]:
            prefix, jobs, kind, drain = contenders[name]
            if clean:
                await truncate(conn, prefix)
            else:
                await conn.execute(f"VACUUM {prefix}jobs")
            await fill(conn, prefix, jobs, kind)
            start = time.perf_counter()
            timed = await drain()
            # A drain that times itself (the process scenarios: from "go" to the last
            # child's "done", without starting and stopping the processes) says so.
            seconds[name].append(timed if isinstance(timed, float)
                                 else time.perf_counter() - start)
            left = await conn.fetchval(
                f"SELECT count(*) FROM {prefix}jobs WHERE status <> 'completed' AND kind = $1 "
                "AND visible_at <= now()", kind)
            if left:
                raise RuntimeError(f"{name}: {left} jobs not completed after the drain")
    return seconds


@scenario("drain", "worker drain, no-op jobs, one process")
async def drain(bench: Bench) -> None:
    """One `Worker(..., concurrency=10 | 50).run(until_empty=True)` with the library's
    defaults (adaptive prefetch included), in the benchmark's process and in a process of
    its own (timed there from "go" to its return, the process started and connected
    beforehand), drains N no-op jobs (20,000 at full size), every run journaled; against
    a raw asyncpg loop claiming 100 rows per statement with `FOR UPDATE SKIP LOCKED` and
    marking them done in one statement, and the same loop one row at a time (on fewer
    jobs: it is slow). Each statement is one transaction; no journal for raw. In-process
    runs are timed from `Worker(...)` to `run()` returning (boot and the final empty claim
    included). `prefetch=0` (claims for free slots only, the default before adaptive
    prefetch) is measured beside the defaults."""
    n, n1 = bench.size.drain, bench.size.one_row
    async with (
        bench.fresh_prefix() as vp,
        bench.fresh_prefix() as rp,
        Queue.connect(bench.dsn, prefix=vp) as queue,
    ):
        conn = await asyncpg.connect(bench.dsn)
        try:
            with quiet_logs():
                secs = await take_turns(bench, conn, {
                    "raw100": (rp, n, KIND, lambda: drain_on(conn, rp, 100)),
                    "raw1": (rp, n1, KIND, lambda: drain_on(conn, rp, 1)),
                    "c10": (vp, n, KIND, lambda: worker_drain(queue, 10)),
                    "c50": (vp, n, KIND, lambda: worker_drain(queue, 50)),
                    "c10proc": (vp, n, KIND,
                                functools.partial(_processes, bench, "worker", vp, 1, 10)),
                    "c50proc": (vp, n, KIND,
                                functools.partial(_processes, bench, "worker", vp, 1, 50)),
                    "c10p0": (vp, n, KIND, lambda: worker_drain(queue, 10, 0)),
                    "c50p0": (vp, n, KIND, lambda: worker_drain(queue, 50, 0)),
                })
        finally:
            await conn.close()
    batched, one = "raw claim 100 + done 100 per statement", "raw claim 1 + done 1"
    bench.record(Figure(bench.scenario, batched, n, secs["raw100"], raw=True))
    bench.record(Figure(bench.scenario, one, n1, secs["raw1"], raw=True))
    for c in (10, 50):
        bench.record(Figure(bench.scenario, f"Worker concurrency={c}", n, secs[f"c{c}"],
                            (batched, one), note="in-process, journaled, defaults"))
    for c in (10, 50):
        bench.record(Figure(bench.scenario, f"Worker concurrency={c}, own process", n,
                            secs[f"c{c}proc"], (batched, one),
                            note="a process of its own, journaled, defaults"))
    for c in (10, 50):
        bench.record(Figure(bench.scenario, f"Worker concurrency={c}, prefetch=0", n,
                            secs[f"c{c}p0"], (batched, one),
                            note="in-process, claims for free slots only"))


@scenario("slots", "slot utilisation: jobs that wait 20 ms, concurrency 200")
async def slots(bench: Bench) -> None:
    """Jobs that `await asyncio.sleep(0.02)` (a call to another service), N of them
    (20,000 at full size), drained by one `Worker(concurrency=200)` with the library's
    defaults, in the benchmark's process and in a process of its own, timed as in
    `drain`; `prefetch=0` beside them. The reference is computed, not measured: 200
    slots each running one 20 ms job after another, 10,000 jobs/s. Beside it, measured
    in the same turns: asyncio alone, 200 coroutines each sleeping 20 ms N/200 times
    with nothing else to do: what the event loop's own timers allow (a sleep of 20 ms
    wakes late by about a millisecond on a quiet loop: the selector rounds its timeout
    up to a millisecond)."""
    n = bench.size.drain
    ideal = "ideal: 200 slots × one 20 ms job after another"
    alone = "asyncio alone: 200 coroutines × sleep(0.02) one after another, no database"
    async with bench.fresh_prefix() as vp, Queue.connect(bench.dsn, prefix=vp) as queue:
        conn = await asyncpg.connect(bench.dsn)
        try:
            with quiet_logs():
                secs = await take_turns(bench, conn, {
                    "c200": (vp, n, SLEEPY_KIND, lambda: worker_drain(queue, 200, task=Sleepy)),
                    "c200proc": (vp, n, SLEEPY_KIND, functools.partial(
                        _processes, bench, "worker-sleepy", vp, 1, 200)),
                    "c200p0": (vp, n, SLEEPY_KIND,
                               lambda: worker_drain(queue, 200, 0, task=Sleepy)),
                    "alone": (vp, 0, SLEEPY_KIND, lambda: sleepers_alone(n, 200)),
                })
        finally:
            await conn.close()
    bench.record(Figure(bench.scenario, ideal, n, [n * SLEEP / 200] * bench.size.runs,
                        raw=True, note="computed, not measured"))
    bench.record(Figure(bench.scenario, alone, n, secs["alone"], raw=True,
                        note="measured, in-process: the event loop's own timers"))
    refs = (ideal, alone)
    bench.record(Figure(bench.scenario, "Worker concurrency=200", n, secs["c200"], refs,
                        note="in-process, journaled, defaults"))
    bench.record(Figure(bench.scenario, "Worker concurrency=200, own process", n,
                        secs["c200proc"], refs,
                        note="a process of its own, journaled, defaults"))
    bench.record(Figure(bench.scenario, "Worker concurrency=200, prefetch=0", n,
                        secs["c200p0"], refs, note="in-process, claims for free slots only"))


async def sleepers_alone(n: int, slots: int) -> float:
    """``n`` sleeps of 20 ms over ``slots`` coroutines, one after another in each, and
    nothing else: the seconds it took."""
    async def slot(count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(SLEEP)

    start = time.perf_counter()
    await asyncio.gather(*(slot(n // slots + (i < n % slots)) for i in range(slots)))
    return time.perf_counter() - start


async def _until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    task = asyncio.create_task(worker.run())
    try:
        await _until(lambda: worker.health.ready or task.done(), 30, "the worker to listen")
        if task.done():
            task.result()
        yield worker
    finally:
        await worker.drain(grace=5)
        await task


@contextlib.asynccontextmanager
async def probe_in_process(queue: Queue) -> AsyncIterator[Starts]:
    """An idle in-process worker (concurrency 10, defaults): its probes' start times."""
    STARTED.clear()
    async with running(Worker(queue, tasks=[Probe], concurrency=10)):
        yield STARTED


@contextlib.asynccontextmanager
async def probe_in_child(bench: Bench, prefix: str, mode: str = "worker-probe",
                         ) -> AsyncIterator[Starts]:
    """An idle worker in a process of its own (concurrency 10, defaults), or with
    ``mode="raw-probe"`` the raw LISTEN + claim loop, reporting its probes' start times
    (``perf_counter``: one clock for every process of the host)."""
    child = await Child.start(mode, bench.dsn, prefix, 10)
    started = Starts()

    async def read() -> None:
        while (line := await child.read()).startswith("started "):
            _, k, t = line.split()
            started[int(k)] = float(t)

    reader = asyncio.create_task(read())
    try:
        yield started
    finally:
        await child.close()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


@contextlib.asynccontextmanager
async def raw_in_process(dsn: str, prefix: str) -> AsyncIterator[Starts]:
    """The raw LISTEN + claim loop in this process: its probes' start times."""
    started = Starts()
    async with RawConsumer(dsn, prefix,
                           lambda p: started.__setitem__(p["n"], time.perf_counter())):
        yield started


async def pickup(bench: Bench, queue: Queue, raw_prefix: str, n: int,
                 rate: float = 50.0, *, process: bool = False, warmup: int = PICKUP_WARMUP,
                 ) -> tuple[list[float], list[float], float]:
    """Latencies (ms) from enqueue commit to handler start, venturi and raw, ``n`` each.

    One job every ``1/rate`` s, alternating venturi and raw jobs, each only after the
    previous one started: both consumers are idle and LISTENing when a job arrives, and
    the k-th sample of each is taken within ``1/rate`` s of the other's, so both see the
    same machine (the order in a pair alternates). Commit time is when the producer's
    call returned; start time is what the handler recorded (in this process, or with
    ``process`` in each consumer's own process); one clock (``perf_counter``). The
    first ``warmup`` pairs are run the same way and not counted: a consumer's first
    claims on a new connection prepare (plan) their statements, a once-per-connection
    cost that ten samples of a thousand would otherwise turn into the p99.
    """
    committed: dict[str, dict[int, float]] = {"venturi": {}, "raw": {}}
    insert = INSERT_NOTIFY.format(p=raw_prefix)
    conn = await asyncpg.connect(bench.dsn)
    if process:
        consumer = probe_in_child(bench, queue.prefix)
        raw_consumer = probe_in_child(bench, raw_prefix, "raw-probe")
    else:
        consumer = probe_in_process(queue)
        raw_consumer = raw_in_process(bench.dsn, raw_prefix)
    try:
        async with consumer as started, raw_consumer as raw_started:
            start = time.perf_counter()
            tick = start
            for i in range(-2 * warmup, 2 * n):
                tick += 1 / (2 * rate)
                await asyncio.sleep(max(tick - time.perf_counter(), 0))
                k = i // 2  # negative: a warm-up pair
                if (i + k) % 2:  # alternate which goes first
                    await queue.enqueue(Probe(n=k, uri=f"s3://bench/objects/{k:08d}"))
                    committed["venturi"][k] = time.perf_counter()
                    await started.wait(k, 10, "a venturi pickup")
                else:
                    await conn.fetchval(insert, uuid7_many(1)[0], KIND,
                                        orjson.dumps(payload(k)).decode())
                    committed["raw"][k] = time.perf_counter()
                    await raw_started.wait(k, 10, "a raw pickup")
            seconds = time.perf_counter() - start
            ms_v = [(started[k] - t) * 1000 for k, t in committed["venturi"].items() if k >= 0]
    finally:
        await conn.close()
    ms_r = [(raw_started[k] - t) * 1000 for k, t in committed["raw"].items() if k >= 0]
    return ms_v, ms_r, seconds


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(0.99 * len(ordered)) - 1))]


def p99_ratio_interval(ms_v: list[float], ms_r: list[float], rounds: int = 1000,
                       seed: int = 19) -> tuple[float, float]:
    """A 95 % interval of p99(venturi) / p99(raw), by resampling the pairs (the k-th
    sample of each, taken a few milliseconds apart) with replacement: how far the ratio
    of one run could move with the luck of which samples landed in the tail."""
    rng = random.Random(seed)
    pairs = list(zip(ms_v, ms_r, strict=True))
    ratios = sorted(
        _p99([v for v, _ in draw]) / _p99([r for _, r in draw])
        for draw in (rng.choices(pairs, k=len(pairs)) for _ in range(rounds)))
    return ratios[int(0.025 * rounds)], ratios[int(0.975 * rounds) - 1]


def _pickup_figures(bench: Bench, ms_v: list[float], ms_r: list[float], seconds: float,
                    suffix: str = "", note: str = "", raw_suffix: str | None = None) -> None:
    raw = f"raw LISTEN + claim loop{suffix if raw_suffix is None else raw_suffix}"
    bench.record(Figure(bench.scenario, raw, len(ms_r), [seconds], raw=True, unit="ms",
                        samples=ms_r, note="plain asyncpg, same table shape"))
    low, high = p99_ratio_interval(ms_v, ms_r)
    note = (f"{note or 'idle, LISTENing, in-process'}; p99 / raw's {_p99(ms_v) / _p99(ms_r):.2f}×"
            f" (95 % interval over resampled pairs {low:.2f}-{high:.2f}×)")
    bench.record(Figure(bench.scenario, f"Worker pickup{suffix}", len(ms_v), [seconds], (raw,),
                        unit="ms", samples=ms_v, note=note))


@scenario("pickup", "pickup latency into an idle worker")
async def pickup_latency(bench: Bench) -> None:
    """Jobs enqueued one at a time (`Queue.enqueue`, about 50 per second, each after the
    previous one started) into an idle worker (concurrency 10, defaults, LISTENing), in
    the benchmark's process, then in a process of its own: latency = handler start −
    enqueue commit, on one clock (`perf_counter`, the host's monotonic clock). The raw
    reference: a plain asyncpg LISTEN connection and a claim loop (claim up to 100,
    mark done) woken by each notification, fed by an INSERT + pg_notify statement,
    placed as the worker is (in the benchmark's process, then in a process of its
    own), interleaved with venturi's jobs sample by sample in the same run, so both
    p99s see the same machine. The producer waits for each start on an event, not by
    polling. `PICKUP_SAMPLES` × the size's samples
    each (3,000 at full size: a p99 is then the 30th-worst sample, not the 10th),
    after `PICKUP_WARMUP` uncounted pairs; the Worker's note gives the p99 ratio and
    its 95 % interval over resampled pairs."""
    n = PICKUP_SAMPLES * bench.size.pickup
    async with (
        bench.fresh_prefix() as vp,
        bench.fresh_prefix() as rp,
        Queue.connect(bench.dsn, prefix=vp) as queue,
    ):
        with quiet_logs():
            ms_v, ms_r, seconds = await pickup(bench, queue, rp, n)
            _pickup_figures(bench, ms_v, ms_r, seconds)
            ms_v, ms_r, seconds = await pickup(bench, queue, rp, n, process=True)
            _pickup_figures(bench, ms_v, ms_r, seconds, suffix=", own process",
                            note="idle, LISTENing, a process of its own")


async def load_backlog(conn: asyncpg.Connection, prefix: str, finished: int,
                       future: int) -> None:
    """``finished`` completed jobs (each journaled) and ``future`` pending ones due in
    an hour or more, of the kinds the scenario drains: what a claim must not walk."""
    jobs = f"{prefix}jobs"
    cols = "id, kind, payload, priority, status, created_at, visible_at, finished_at, run_count"
    kinds = f"(ARRAY['{KIND}', '{RAW_KIND}', '{PROBE_KIND}'])[1 + g % 3]"
    async with bulk_load(conn, prefix):
        await conn.execute(f"""
            INSERT INTO {jobs} ({cols})
            SELECT {_id('t.ts', 'c00')}, {kinds}, jsonb_build_object('n', g), 1, 'completed',
                   t.ts, t.ts, t.ts + interval '1 second', 1
            FROM generate_series(1, $1::int) AS g,
                 LATERAL (SELECT now() - interval '30 days'
                                 + (g * (interval '30 days' / $1::int)) AS ts) AS t
        """, finished)
        await conn.execute(f"""
            INSERT INTO {jobs} ({cols})
            SELECT {_id('now()', 'f00')}, {kinds}, jsonb_build_object('n', g), 1, 'pending',
                   now(), now() + interval '1 hour' + g * interval '1 second', NULL, 0
            FROM generate_series(1, $1::int) AS g
        """, future)
        await conn.execute(f"""
            INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome)
            SELECT id, kind, 1, finished_at, 'completed' FROM {jobs} WHERE status = 'completed'
        """)
    await conn.execute(f"VACUUM ANALYZE {jobs}")
    await conn.execute(f"VACUUM ANALYZE {prefix}journal")


@scenario("backlog", "drain and pickup with a large backlog in the table")
async def backlog(bench: Bench) -> None:
    """The drain at concurrency 50 and the pickup latency again, on a table already
    holding 1,000,000 completed (journaled) jobs and 100,000 scheduled an hour or more
    ahead (full size; built with INSERT ... SELECT generate_series), against the same
    drain on an empty table in the same runs, and the raw batched loop on both (the
    backlog table is vacuumed before each drain, the empty one truncated). The claim
    statement's plan at that size is in the note (EXPLAIN ANALYZE, rolled back)."""
    n = bench.size.drain
    async with (
        bench.fresh_prefix() as bp,
        bench.fresh_prefix() as ep,
        Queue.connect(bench.dsn, prefix=bp) as big,
        Queue.connect(bench.dsn, prefix=ep) as empty,
    ):
        conn = await asyncpg.connect(bench.dsn)
        try:
            built = time.perf_counter()
            await load_backlog(conn, bp, bench.size.finished, bench.size.future)
            built = time.perf_counter() - built
            with quiet_logs():
                secs = await take_turns(bench, conn, {
                    "raw_empty": (ep, n, RAW_KIND, lambda: drain_on(conn, ep, 100, RAW_KIND)),
                    "raw_big": (bp, n, RAW_KIND, lambda: drain_on(conn, bp, 100, RAW_KIND)),
                    "empty": (ep, n, KIND, lambda: worker_drain(empty, 50)),
                    "big": (bp, n, KIND, lambda: worker_drain(big, 50)),
                }, clean=False)
                await fill(conn, bp, 1_000)
                plan = await explain(conn, bp, Statement(
                    "claim", "", ([KIND], [LEASE], 50, 5, 5, "bench/boot"), ("jobs_claim",)))
                await worker_drain(big, 50)
                await conn.execute(f"VACUUM {bp}jobs")
                ms_v, ms_r, seconds = await pickup(bench, big, bp, bench.size.pickup)
        finally:
            await conn.close()
    rows = f"{bench.size.finished:,} completed + {bench.size.future:,} future rows"
    # The jobs table's indexes (the claim also probes the small kinds table's key).
    scan = ("index scan on " + ", ".join(i for i in plan.indexes if i.startswith("jobs_"))) \
        if plan.index_driven else f"NOT index-driven: seq scans {plan.seq_scans}"
    raw_e, raw_b = "raw claim 100 + done 100, empty table", f"raw claim 100 + done 100, {rows}"
    bench.record(Figure(bench.scenario, raw_e, n, secs["raw_empty"], raw=True))
    bench.record(Figure(bench.scenario, raw_b, n, secs["raw_big"], raw=True))
    empty_name = "Worker concurrency=50, empty table"
    bench.record(Figure(bench.scenario, empty_name, n, secs["empty"], (raw_e,)))
    bench.record(Figure(
        bench.scenario, f"Worker concurrency=50, {rows}", n, secs["big"], (raw_b, empty_name),
        note=f"claim plan at this size: {scan}, {plan.ms:.1f} ms for 50 rows; "
             f"backlog built in {built:.0f} s"))
    _pickup_figures(bench, ms_v, ms_r, seconds, suffix=f", {rows}",
                    note="idle, LISTENing, in-process, same backlog table")


class Child:
    """One ``benchmarks.workerproc`` process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, mode: str, dsn: str, prefix: str, concurrency: int) -> Child:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.workerproc", mode, dsn, prefix, str(concurrency),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=ROOT, env=env)
        child = cls(proc)
        if await child.read() != "ready":
            raise RuntimeError(f"benchmark child {mode} did not start")
        return child

    async def read(self) -> str:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 600)
        return line.decode().strip()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    async def done(self) -> dict[str, float]:
        line = await self.read()
        if not line.startswith("done "):
            raise RuntimeError(f"benchmark child failed: {line!r}")
        result: dict[str, float] = json.loads(line[5:])
        return result

    async def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send("exit")
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    def cpu_seconds(self) -> float:
        """User + system CPU time so far (/proc/PID/stat; a child that said "done" is
        still alive, waiting for "exit")."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")


async def _processes(bench: Bench, mode: str, prefix: str, count: int,
                     concurrency: int, cpu: list[float] | None = None,
                     on_go: Callable[[], object] | None = None) -> float:
    """Start ``count`` children, tell them all to go, wait for all: the wall time. With
    ``cpu``, append each child's CPU seconds (user + system) from go to done; ``on_go``
    is called just before "go" (the children booted and connected)."""
    children = [await Child.start(mode, bench.dsn, prefix, concurrency) for _ in range(count)]
    try:
        if on_go is not None:
            on_go()
        before = [c.cpu_seconds() for c in children]
        start = time.perf_counter()
        for c in children:
            c.send("go")
        for c in children:
            await c.done()
        seconds = time.perf_counter() - start
        if cpu is not None:
            cpu.extend(c.cpu_seconds() - b for c, b in zip(children, before, strict=True))
        return seconds
    finally:
        for c in children:
            await c.close()


@scenario("memory", "worker memory across a long drain")
async def memory(bench: Bench) -> None:
    """One worker process at concurrency 100 runs through N no-op jobs (200,000 at
    full size, enqueued beforehand); the parent samples the child's VmRSS from /proc
    every 0.25 s (a drain now lasts seconds, not minutes). Start is the process ready to go
    (imported, connected), warm the sample a tenth of the way in; the drift is end
    against warm. The raw batched loop in a child process is the floor: Python,
    asyncpg and one connection."""
    n = bench.size.memory
    figures = {}
    async with bench.fresh_prefix() as mp:
        conn = await asyncpg.connect(bench.dsn)
        try:
            for mode in ("raw", "worker"):
                await truncate(conn, mp)
                for lo in range(0, n, 50_000):
                    await fill(conn, mp, min(50_000, n - lo))
                child = await Child.start(mode, bench.dsn, mp, 100)
                try:
                    samples = [child.rss_mb()]
                    child.send("go")
                    result = asyncio.ensure_future(child.done())
                    while not result.done():
                        await asyncio.wait([result], timeout=bench.size.rss_every)
                        samples.append(child.rss_mb())
                    figures[mode] = (samples, result.result()["seconds"])
                finally:
                    await child.close()
        finally:
            await conn.close()
    raw = "raw batched loop process"
    samples, seconds = figures["raw"]
    bench.record(Figure(bench.scenario, raw, n, [seconds], raw=True, unit="MB", samples=samples))
    samples, seconds = figures["worker"]
    bench.record(Figure(bench.scenario, "Worker concurrency=100 process", n, [seconds], (raw,),
                        unit="MB", samples=samples))
