"""Steady state: a producer at a fixed rate against two ``venturi worker`` processes
with retention, on a private PostgreSQL cluster built with stated settings, watching
whether the tables stay bounded and the pickup lag flat.

    python -m benchmarks.steady --autovacuum on  --minutes 10           # full size
    python -m benchmarks.steady --autovacuum off --minutes 10 --maintenance off   # no vacuum
    python -m benchmarks.steady --minutes 0.5 --rate 300 --out /tmp/steady.md   # quick

The producer (in this process) sends ``--rate`` jobs per second in small
``enqueue_many`` batches, each job stamped with its send time; the workers
(``--app benchmarks.steady_tasks``, ``--retention completed=20s``) write every
job's pickup lag (handler start - send time) to a file. The driver samples every
``--interval`` seconds: jobs + journal total size, dead tuples, the pending backlog,
worker RSS, the load average. After ``--minutes`` the producer stops and the driver
waits (at most ``--drain-timeout``) for the backlog to empty, then says what is
left behind. The results (per quarter of the run) go to ``--out``
(default benchmarks/results-steady.md), with the command and the cluster settings.

``--maintenance on|off`` is the workers' own vacuum (``venturi worker
--maintenance``, on by default; what it did is read from their logs),
``--reset-storage`` removes
the storage parameters of sql/0002_storage.sql after migrating (the "before"),
``--explain`` samples the plan of one tier's claim scan, ``--statements`` the
store's statements' cost per call (pg_stat_statements), ``--hold-snapshot A:B``
keeps a repeatable-read snapshot open from second A to B of the run (what an
idle-in-transaction session does to the xmin horizon), ``--burst A:N`` sends N
more jobs at second A (a backlog, as a stalled consumer leaves), ``--analyze-at S``
runs ANALYZE on the jobs table at second S, ``--dsn`` runs against an
existing server instead of a private cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

import venturi

from . import steady_report
from .cluster import DURABLE, SHOWN, UNSAFE, BenchCluster
from .harness import drop_statements
from .steady_sample import Sample, sample
from .steady_tasks import LAGS_DIR, Tick
from .workers import WorkerProc

HERE = Path(__file__).resolve().parent
TABLES = ("jobs", "journal")


@dataclass
class SteadyResult:
    settings: dict[str, str]
    options: dict[str, Any]
    samples: list[Sample] = field(default_factory=list)
    lags: list[tuple[float, float]] = field(default_factory=list)  # (sent at, lag ms)
    sent: int = 0
    stopped_at: float = 0.0
    empty_after: float | None = None  # seconds after the producer stopped
    left_pending: int = 0
    left_claimed: int = 0
    exit_codes: list[int | None] = field(default_factory=list)
    maintenance: list[dict[str, Any]] = field(default_factory=list)
    load: tuple[str, str] = ("", "")


class Producer:
    """Sends ``rate`` jobs per second in batches every ``tick`` seconds, catching up
    after a slow batch; each job carries its batch's send time."""

    def __init__(self, queue: venturi.Queue, rate: float, tick: float = 0.01,
                 burst: tuple[float, int] | None = None) -> None:
        self.queue, self.rate, self.tick = queue, rate, tick
        self.burst = burst  # (second, jobs): that many more at once, on top of the rate
        self.sent = self.extra = 0

    async def run(self, seconds: float) -> None:
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds:
            if self.burst and elapsed >= self.burst[0] and not self.extra:
                for _ in range(0, self.burst[1], 2_000):
                    at = time.time()
                    await self.queue.enqueue_many(
                        [Tick(n=self.sent + i, at=at) for i in range(2_000)])
                    self.sent += 2_000
                    self.extra += 2_000
            due = min(int(self.rate * elapsed) - (self.sent - self.extra), 2_000)
            if due > 0:
                at = time.time()
                await self.queue.enqueue_many(
                    [Tick(n=self.sent + i, at=at) for i in range(due)])
                self.sent += due
            await asyncio.sleep(self.tick)


async def _hold_snapshot(dsn: str, start: float, stop: float) -> None:
    """Hold a repeatable-read snapshot from ``start`` to ``stop`` seconds into the run."""
    await asyncio.sleep(start)
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction(isolation="repeatable_read"):
            await conn.fetchval("SELECT 1")
            await asyncio.sleep(max(stop - start, 0))
    finally:
        await conn.close()


async def _analyze_at(dsn: str, prefix: str, at: float) -> None:
    """ANALYZE the jobs table ``at`` seconds into the run: new statistics in pg_class
    invalidate the workers' cached plans of statements on it."""
    await asyncio.sleep(at)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"ANALYZE {prefix}jobs")
    finally:
        await conn.close()


def _maintenance_log(procs: list[WorkerProc]) -> list[dict[str, Any]]:
    """What the workers' vacuum service did (venturi/worker/vacuum.py), from their logs."""
    runs = []
    for p in procs:
        for line in p.output().splitlines():
            if '"table_vacuumed"' not in line and '"vacuum_' not in line:
                continue
            with contextlib.suppress(ValueError):
                e = json.loads(line)
                if e.get("event") in ("table_vacuumed", "vacuum_held_back"):
                    runs.append({"by": p.name, "table": e["table"], "skipped": None,
                                 "seconds": e.get("seconds", 0.0)})
                elif e.get("event") == "vacuum_skipped":
                    runs.append({"by": p.name, "table": e["table"], "skipped": e["skipped"],
                                 "seconds": 0.0})
    return runs


async def _reset_storage(conn: asyncpg.Connection, prefix: str) -> None:
    """Back to the storage parameters of sql/0001_init.sql alone: none, and the jobs
    table's fill factor of 80."""
    for table in (*TABLES, "workers"):
        keys = await conn.fetchval(
            "SELECT array_agg(split_part(o, '=', 1)) FROM pg_class, unnest(reloptions) AS o"
            " WHERE oid = $1::regclass", f"{prefix}{table}")
        if keys:
            await conn.execute(f"ALTER TABLE {prefix}{table} RESET ({', '.join(keys)})")
    await conn.execute(f"ALTER TABLE {prefix}jobs SET (fillfactor = 80)")


def _read_lags(directory: Path, t0_wall: float) -> list[tuple[float, float]]:
    lags = []
    for path in directory.glob("lags-*.txt"):
        for line in path.read_text().splitlines():
            at, ms = line.split()
            lags.append((float(at) - t0_wall, float(ms)))
    lags.sort()
    return lags


async def steady(dsn: str, *, rate: float, seconds: float, workers: int = 2,
                 concurrency: int = 10, retention: str = "completed=20s",
                 interval: float = 2.0, drain_timeout: float = 60.0, maintenance: bool = True,
                 reset_storage: bool = False, explain: bool = False, statements: bool = False,
                 hold_snapshot: tuple[float, float] | None = None,
                 burst: tuple[float, int] | None = None, analyze_at: float | None = None,
                 logdir: Path) -> SteadyResult:
    prefix = f"steady{secrets.token_hex(3)}_"
    lagdir = logdir / f"lags-{prefix}"
    lagdir.mkdir(parents=True)
    conn = await asyncpg.connect(dsn)
    procs: list[WorkerProc] = []
    background: list[asyncio.Task[None]] = []
    stop = asyncio.Event()
    try:
        if statements:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        settings = {r["name"]: r["setting"] for r in await conn.fetch(
            "SELECT name, current_setting(name) AS setting FROM pg_settings"
            " WHERE name = ANY($1::text[])",
            list(SHOWN))}
        settings = {name: settings[name] for name in SHOWN if name in settings}
        async with venturi.Queue.connect(dsn, prefix=prefix, max_size=4) as queue:
            await queue.migrate()
            if reset_storage:
                await _reset_storage(conn, prefix)
            options = {name: r for name, r in await conn.fetch(
                "SELECT relname, array_to_string(reloptions, ', ') FROM pg_class"
                " WHERE relname = ANY($1::text[])", [f"{prefix}{t}" for t in TABLES])}
            result = SteadyResult(settings, {
                "prefix": prefix, "rate": rate, "seconds": seconds, "workers": workers,
                "concurrency": concurrency, "retention": retention,
                "maintenance": maintenance, "hold_snapshot": hold_snapshot, "burst": burst,
                "analyze_at": analyze_at,
                "table options": {k.removeprefix(prefix): v for k, v in options.items()}})
            procs = [WorkerProc(dsn, prefix, logdir, name=f"steady-{i}", concurrency=concurrency,
                                app="benchmarks.steady_tasks",
                                extra=["--retention", retention,
                                       "--maintenance", "on" if maintenance else "off"],
                                env={LAGS_DIR: str(lagdir)}) for i in range(workers)]
            while await conn.fetchval(f"SELECT count(*) FROM {prefix}workers") < workers:
                dead = [p for p in procs if not p.alive()]
                if dead:
                    raise RuntimeError(f"worker exited: {dead[0].errors()[-2000:]}")
                await asyncio.sleep(0.2)
            if analyze_at is not None:
                background.append(asyncio.create_task(_analyze_at(dsn, prefix, analyze_at)))
            if hold_snapshot:
                background.append(asyncio.create_task(_hold_snapshot(dsn, *hold_snapshot)))
            producer = Producer(queue, rate, burst=burst)
            result.load = (steady_report.load_average(), "")
            t0, t0_wall = time.monotonic(), time.time()
            producing = asyncio.create_task(producer.run(seconds))
            while True:
                t = time.monotonic() - t0
                s = await sample(conn, prefix, t, producer.sent, procs, explain=explain,
                                 statements=statements)
                result.samples.append(s)
                if producing.done():
                    producing.result()  # a failed producer fails the run
                    if not result.stopped_at:
                        result.stopped_at = t
                    if s.pending == 0 and s.claimed == 0:
                        result.empty_after = t - result.stopped_at
                        break
                    if t - result.stopped_at > drain_timeout:
                        break
                dead = [p for p in procs if not p.alive()]
                if dead:
                    raise RuntimeError(f"worker exited with {dead[0].returncode}: "
                                       f"{dead[0].errors()[-2000:]}")
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0 - t)))
            result.sent = producer.sent
            result.left_pending, result.left_claimed = s.pending, s.claimed
            result.load = (result.load[0], steady_report.load_average())
        stop.set()
        for task in background:
            task.cancel()
        for p in procs:
            p.terminate()
        result.exit_codes = [await asyncio.to_thread(p.wait, 60) for p in procs]
        result.lags = _read_lags(lagdir, t0_wall)
        result.maintenance = _maintenance_log(procs)
        return result
    finally:
        stop.set()
        for task in background:
            task.cancel()
        for p in procs:
            if p.alive():
                p.kill9()
        for statement in drop_statements(prefix):
            await conn.execute(statement)
        await conn.close()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.steady", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--autovacuum", choices=("on", "off"), default="on")
    p.add_argument("--durability", choices=("on", "off"), default="on",
                   help="fsync, synchronous_commit, full_page_writes (default on, as in"
                        " production)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="another server setting of the private cluster")
    p.add_argument("--dsn", help="run on this server instead of a private cluster")
    p.add_argument("--rate", type=float, default=3000.0)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--retention", default="completed=20s")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--drain-timeout", type=float, default=60.0)
    p.add_argument("--maintenance", choices=("on", "off"), default="on",
                   help="the workers' own vacuum (venturi worker --maintenance; default on,"
                        " as the worker's)")
    p.add_argument("--reset-storage", action="store_true")
    p.add_argument("--explain", action="store_true")
    p.add_argument("--statements", action="store_true",
                   help="sample pg_stat_statements (private cluster: preloads it)")
    p.add_argument("--hold-snapshot", metavar="A:B")
    p.add_argument("--burst", metavar="A:N", help="N more jobs at once at second A")
    p.add_argument("--analyze-at", type=float, metavar="S", help="ANALYZE the jobs table at S")
    p.add_argument("--out", type=Path, default=HERE / "results-steady.md")
    p.add_argument("--title", default="")
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    logdir = Path(tempfile.mkdtemp(prefix="venturi-steady-"))
    hold = tuple(float(x) for x in args.hold_snapshot.split(":")) if args.hold_snapshot else None

    def run(dsn: str) -> SteadyResult:
        return asyncio.run(steady(
            dsn, rate=args.rate, seconds=args.minutes * 60, workers=args.workers,
            concurrency=args.concurrency, retention=args.retention, interval=args.interval,
            drain_timeout=args.drain_timeout, maintenance=args.maintenance == "on",
            reset_storage=args.reset_storage, explain=args.explain, statements=args.statements,
            hold_snapshot=hold,  # type: ignore[arg-type]
            burst=(float(args.burst.split(":")[0]), int(args.burst.split(":")[1]))
            if args.burst else None, analyze_at=args.analyze_at,
            logdir=logdir))

    if args.dsn:
        result = run(args.dsn)
    else:
        settings = {**(DURABLE if args.durability == "on" else UNSAFE),
                    "autovacuum": args.autovacuum, "log_autovacuum_min_duration": "0"}
        if args.statements:
            settings["shared_preload_libraries"] = "pg_stat_statements"
        settings.update(dict(s.split("=", 1) for s in args.set))
        with BenchCluster(settings) as cluster:
            try:
                result = run(cluster.dsn)
            finally:  # the server's log (autovacuum, auto_explain) outlives the cluster
                shutil.copy(cluster.log, logdir / "server.log")
    command = shlex.join(["python", "-m", "benchmarks.steady", *argv])
    note = args.note
    if not args.dsn:
        note = steady_report.autovacuum_summary((logdir / "server.log").read_text()) + (
            f"\n\n{note}" if note else "")
    text = steady_report.render(result, command, title=args.title, note=note)
    args.out.write_text(text)
    print(text)
    print(f"logs in {logdir}", file=sys.stderr)
    return 0 if steady_report.verdict(result).ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
