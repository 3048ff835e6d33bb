"""venturi beside its peers, PgQueuer and oban (Python), in the same run on the same
machine: drain at concurrency 10 and 50, and enqueue one job per call.

Every consumer runs in a process of its own, started and connected before "go", with its
library's defaults but for the concurrency; the peers in venvs of their own, each on a
database of its own with its schema installed by its own installer
(:mod:`benchmarks.peerenv`). The raw batched loop of the ``drain`` scenario is the
reference for all. A peer whose venv cannot be had is skipped with one line; venturi and
the raw loop are measured all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Awaitable, Callable

import asyncpg
import orjson

from venturi import Queue
from venturi._ids import uuid7

from .. import peerenv
from ..harness import Bench, Figure, scenario, truncate
from ..raw import INSERT_NOTIFY, RawConsumer, drain_on
from ..report import ratio
from ..tasks import KIND, Probe, payload, task
from .enqueue import RAW_ONE
from .worker import _processes, _until, fill, probe_in_child, quiet_logs

CONCURRENCIES = (10, 50)
# The targets venturi is held to (benchmarks/results-peers.md): its drain against
# PgQueuer's at each concurrency, and against the raw batched loop at 50.
TARGETS = {10: 4.0, 50: 2.3}
RAW_DRAIN = "raw claim 100 + done 100 per statement"
RAW_ENQUEUE = "raw single-row INSERT"
RAW_PICKUP = "raw LISTEN + claim loop pickup"
VENTURI_PICKUP = "Worker pickup, own process"
PICKUP_RATE = 50.0  # jobs per second for each consumer, one at a time
WARMUP = 10  # pickups per consumer before the measured ones


def _venturi(c: int) -> str:
    return f"Worker concurrency={c}, own process"


def _peer(ready: peerenv.Ready, c: int) -> str:
    return f"{ready.label} concurrency={c}, own process"


def _tuned(ready: peerenv.Ready, c: int) -> str:
    return f"{ready.label} concurrency={c}, batch_size={c // 2}, own process"


def _pickup(ready: peerenv.Ready) -> str:
    return f"{ready.label} pickup, own process"


async def turns(bench: Bench,
                contenders: dict[str, Callable[[], Awaitable[float]]]) -> dict[str, list[float]]:
    """``bench.size.runs`` runs; in each, every contender in turn (the order rotates
    between runs, so a burst of load falls on each alike), each timing itself."""
    names = list(contenders)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for run in range(bench.size.runs):
        for name in names[run % len(names):] + names[:run % len(names)]:
            seconds[name].append(await contenders[name]())
    return seconds


@scenario("peers", "venturi beside PgQueuer and oban, same run")
async def peers(bench: Bench) -> None:
    """N no-op jobs (20,000 at full size) drained by one consumer process at concurrency
    10 and 50: venturi's `Worker` (library defaults, journaled; `benchmarks.workerproc`),
    PgQueuer (`QueueManager.run(mode=drain, max_concurrent_tasks=C)`, its defaults but
    `batch_size=5` at C=10, where it refuses its default 10 as more than half the limit;
    at C=50 also with `batch_size=25`, the largest it accepts)
    and oban (an `Oban` instance with one queue of limit C, as `oban start --queues`
    runs it), each peer on uvloop as its CLI runs it, in a venv and a database of its
    own; beside the `drain` scenario's raw batched loop (claim 100 + done 100 per
    statement, in the benchmark's process). Each drain is timed from "go" to the last job
    recorded as done, the process started and connected before, its jobs table emptied
    and refilled (untimed) before each run. Then enqueue one job per call, M times (5,000
    at full size): `Queue.enqueue`, PgQueuer's `Queries.enqueue`, oban's `enqueue`,
    against raw single-row INSERTs. Ratios are medians of per-run ratios."""
    n, n1 = bench.size.drain, bench.size.one_by_one
    build = bench.size.name == "full" or os.environ.get("VENTURI_PEERS_BUILD") == "1"
    ready: list[peerenv.Ready] = []
    for peer in peerenv.PEERS:
        got = await peerenv.prepare(peer, build=build)
        if isinstance(got, str):
            print(f"   {got}", flush=True)
        else:
            ready.append(got)
    tuned = [r for r in ready if r.peer is peerenv.PGQUEUER]
    async with contextlib.AsyncExitStack() as stack:
        vp = await stack.enter_async_context(bench.fresh_prefix())
        rp = await stack.enter_async_context(bench.fresh_prefix())
        queue = await stack.enter_async_context(
            Queue.connect(bench.dsn, prefix=vp, min_size=1, max_size=1))
        dsns = {r.label: await stack.enter_async_context(peerenv.database(bench.dsn, r))
                for r in ready}
        conn = await asyncpg.connect(bench.dsn)
        stack.push_async_callback(conn.close)

        async def left(prefix: str) -> None:
            n_left = await conn.fetchval(
                f"SELECT count(*) FROM {prefix}jobs WHERE status <> 'completed'")
            if n_left:
                raise RuntimeError(f"{n_left} jobs not completed after the drain")

        async def raw_drain() -> float:
            await truncate(conn, rp)
            await fill(conn, rp, n)
            start = time.perf_counter()
            await drain_on(conn, rp, 100)
            seconds = time.perf_counter() - start
            await left(rp)
            return seconds

        def venturi_drain(c: int) -> Callable[[], Awaitable[float]]:
            async def run() -> float:
                await truncate(conn, vp)
                await fill(conn, vp, n)
                seconds = await _processes(bench, "worker", vp, 1, c)
                await left(vp)
                return seconds
            return run

        def peer_drain(r: peerenv.Ready, c: int, *options: str) -> Callable[[], Awaitable[float]]:
            return lambda: peerenv.drain(r, dsns[r.label], n, c, *options)

        drains: dict[str, Callable[[], Awaitable[float]]] = {RAW_DRAIN: raw_drain}
        for c in CONCURRENCIES:
            drains[_venturi(c)] = venturi_drain(c)
            drains.update({_peer(r, c): peer_drain(r, c) for r in ready})
        # PgQueuer's default batch (10) is what a user gets; half the concurrency, the
        # largest it accepts, is what a user who tunes it gets (at 10 they are the same).
        drains.update({_tuned(r, 50): peer_drain(r, 50, str(50 // 2)) for r in tuned})

        insert = RAW_ONE.format(p=rp)

        async def raw_enqueue() -> float:
            await truncate(conn, rp)
            start = time.perf_counter()
            for i in range(n1):
                await conn.execute(insert, uuid7(), KIND, orjson.dumps(payload(i)).decode(), 1, 25)
            return time.perf_counter() - start

        async def venturi_enqueue() -> float:
            await truncate(conn, vp)
            start = time.perf_counter()
            for i in range(n1):
                await queue.enqueue(task(i))
            return time.perf_counter() - start

        def peer_enqueue(r: peerenv.Ready) -> Callable[[], Awaitable[float]]:
            return lambda: peerenv.enqueue(r, dsns[r.label], n1)

        enqueues: dict[str, Callable[[], Awaitable[float]]] = {
            RAW_ENQUEUE: raw_enqueue, "Queue.enqueue": venturi_enqueue,
            **{f"{r.label} enqueue": peer_enqueue(r) for r in ready}}
        async def pickups() -> tuple[dict[str, list[float]], float]:
            await truncate(conn, vp, rp)
            raw_started: dict[int, float] = {}
            insert_notify = INSERT_NOTIFY.format(p=rp)

            async def raw_commit(k: int) -> float:
                await conn.fetchval(insert_notify, uuid7(), KIND, orjson.dumps(payload(k)).decode())
                return time.perf_counter()

            async def venturi_commit(k: int) -> float:
                await queue.enqueue(Probe(n=k, uri=f"s3://bench/objects/{k:08d}"))
                return time.perf_counter()

            async with contextlib.AsyncExitStack() as consumers:
                await consumers.enter_async_context(RawConsumer(
                    bench.dsn, rp, lambda p: raw_started.__setitem__(p["n"], time.perf_counter())))
                contenders: dict[str, tuple[Callable[[int], Awaitable[float]],
                                            dict[int, float]]] = {
                    RAW_PICKUP: (raw_commit, raw_started),
                    VENTURI_PICKUP: (venturi_commit, await consumers.enter_async_context(
                        probe_in_child(bench, vp)))}
                for r in ready:
                    p = await consumers.enter_async_context(peerenv.Pickup(r, dsns[r.label]))
                    contenders[_pickup(r)] = (p.commit, p.started)
                return await pickup_turns(contenders, bench.size.pickup)

        with quiet_logs():
            secs = await turns(bench, drains)
            secs |= await turns(bench, enqueues)
            ms, pickup_seconds = await pickups()

    raw_drain_fig = bench.record(Figure(bench.scenario, RAW_DRAIN, n, secs[RAW_DRAIN], raw=True,
                                        note="the drain scenario's raw loop, in-process"))
    peer_note = {r.label: f"Python {r.python}, uvloop, own venv and database" for r in ready}
    for c in CONCURRENCIES:
        for r in ready:
            bench.record(Figure(bench.scenario, _peer(r, c), n, secs[_peer(r, c)], (RAW_DRAIN,),
                                note=peer_note[r.label]))
        also = [_tuned(r, c) for r in tuned if c == 50]
        for name in also:
            bench.record(Figure(bench.scenario, name, n, secs[name], (RAW_DRAIN,),
                                note="its batch_size raised to the largest it accepts"))
        bench.record(Figure(
            bench.scenario, _venturi(c), n, secs[_venturi(c)],
            (RAW_DRAIN, *(_peer(r, c) for r in ready), *also),
            note="journaled, library defaults, stock asyncio"))
    bench.record(Figure(bench.scenario, RAW_ENQUEUE, n1, secs[RAW_ENQUEUE], raw=True,
                        note="on one connection"))
    for r in ready:
        bench.record(Figure(bench.scenario, f"{r.label} enqueue", n1, secs[f"{r.label} enqueue"],
                            (RAW_ENQUEUE,), note=peer_note[r.label]))
    bench.record(Figure(bench.scenario, "Queue.enqueue", n1, secs["Queue.enqueue"],
                        (RAW_ENQUEUE, *(f"{r.label} enqueue" for r in ready)),
                        note="a pool of one connection"))
    bench.record(Figure(bench.scenario, RAW_PICKUP, len(ms[RAW_PICKUP]), [pickup_seconds],
                        raw=True, unit="ms", samples=ms[RAW_PICKUP],
                        note="the pickup scenario's raw consumer, in-process"))
    for r in ready:
        bench.record(Figure(bench.scenario, _pickup(r), len(ms[_pickup(r)]), [pickup_seconds],
                            (RAW_PICKUP,), unit="ms", samples=ms[_pickup(r)],
                            note=f"{peer_note[r.label]}; concurrency 10, producer a process "
                                 "of its own"))
    bench.record(Figure(bench.scenario, VENTURI_PICKUP, len(ms[VENTURI_PICKUP]),
                        [pickup_seconds], (RAW_PICKUP, *(_pickup(r) for r in ready)), unit="ms",
                        samples=ms[VENTURI_PICKUP],
                        note="concurrency 10, defaults; Queue.enqueue in the benchmark's process"))
    _verdicts(bench, ready, raw_drain_fig)


async def pickup_turns(contenders: dict[str, tuple[Callable[[int], Awaitable[float]],
                                                   dict[int, float]]],
                       jobs: int) -> tuple[dict[str, list[float]], float]:
    """Latencies (ms) from commit to handler start: job k goes to each idle consumer in
    turn (the order rotates), ``PICKUP_RATE`` a second each, each only once the previous
    one started; ``WARMUP`` first jobs each are not counted. Returns them and the time."""
    names = list(contenders)
    ms: dict[str, list[float]] = {name: [] for name in names}
    start = tick = time.perf_counter()
    for k in range(-WARMUP, jobs):
        for name in names[k % len(names):] + names[:k % len(names)]:
            tick += 1 / (PICKUP_RATE * len(names))
            await asyncio.sleep(max(tick - time.perf_counter(), 0))
            commit, started = contenders[name]
            committed = await commit(k)
            await _until(functools.partial(started.__contains__, k), 10, f"a {name}")
            if k >= 0:
                ms[name].append((started[k] - committed) * 1000)
    return ms, time.perf_counter() - start


def _verdicts(bench: Bench, ready: list[peerenv.Ready], raw: Figure) -> None:
    """One line per target: the median of per-run ratios against the figure it names
    (the targets hold at full size: at quick size, starting the processes dominates)."""
    by_name = {f.name: f for f in bench.figures if f.scenario == bench.scenario}
    if bench.size.name != "full":
        print(f"   ({bench.size.name} size: the ratios below are no verdict on the targets)",
              flush=True)
    for c in CONCURRENCIES:
        mine = by_name[_venturi(c)]
        for r in ready:
            x = ratio(mine, by_name[_peer(r, c)])
            target = f" (target ≥ {TARGETS[c]}×: {'met' if x >= TARGETS[c] else 'MISSED'})" \
                if r.peer is peerenv.PGQUEUER else ""
            print(f"   venturi / {r.label} at concurrency={c}: {x:.2f}×{target}", flush=True)
            if c == 50 and r.peer is peerenv.PGQUEUER:
                x = ratio(mine, by_name[_tuned(r, c)])
                print(f"   venturi / {r.label} at concurrency={c}, batch_size={c // 2}: "
                      f"{x:.2f}× (beside the target)", flush=True)
    pickup = by_name[VENTURI_PICKUP]
    for r in ready:
        print(f"   venturi pickup p99 / {r.label}'s: "
              f"{pickup.percentile(99) / by_name[_pickup(r)].percentile(99):.2f}×", flush=True)
    share = ratio(by_name[_venturi(50)], raw)
    print(f"   venturi at concurrency=50 / raw batched loop: {share:.0%} "
          f"(target ≥ 50%: {'met' if share >= 0.5 else 'MISSED'})", flush=True)
