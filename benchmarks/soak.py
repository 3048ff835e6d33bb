"""Soak: many jobs through two ``venturi worker`` processes on one queue, watching for
slow degradation: throughput as finished rows pile up, worker memory (RSS), and the
dead tuples of the jobs and journal tables.

    python -m benchmarks.soak                      # full: 200,000 jobs
    python -m benchmarks.soak --jobs 5000 --out /tmp/soak.md   # quick

Runs on a fresh prefix of ``--dsn`` (default the shared test server) and drops it
afterwards. Every job is enqueued first, then the workers drain the queue while the
driver samples every ``--interval`` seconds. ``--vacuum-every S`` makes the driver run
``VACUUM`` on the two tables on that cadence and once more at the end (for servers
where autovacuum is off or too slow). Results go to ``--out`` (default benchmarks/results-soak.md).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

import venturi
from tests.chaos.tasks import Noop

from .harness import drop_statements
from .workers import WorkerProc

DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/test"
HERE = Path(__file__).resolve().parent


@dataclass
class Sample:
    t: float  # seconds since the workers started
    completed: int
    rss_kib: list[int | None]
    dead: dict[str, int]
    live: dict[str, int]
    autovacuums: dict[str, int]
    vacuums: dict[str, int]
    size_kib: dict[str, int]


@dataclass
class SoakResult:
    prefix: str
    jobs: int
    workers: int
    concurrency: int
    enqueue_seconds: float
    samples: list[Sample] = field(default_factory=list)
    exit_codes: list[int | None] = field(default_factory=list)
    left_claimed: int = 0
    not_completed: int = 0
    server: dict[str, str] = field(default_factory=dict)
    driver_vacuums: int = 0

    def at(self, done: int) -> float:
        """When ``done`` jobs had completed, interpolated between samples."""
        prev = None
        for s in self.samples:
            if s.completed >= done:
                if prev is None or s.completed == prev.completed:
                    return s.t
                frac = (done - prev.completed) / (s.completed - prev.completed)
                return prev.t + frac * (s.t - prev.t)
            prev = s
        raise ValueError(f"never reached {done} completed jobs")

    def rate(self, lo: float, hi: float) -> float:
        """Jobs per second between the ``lo`` and ``hi`` fractions of the run."""
        a = max(1, round(self.jobs * lo))
        b = round(self.jobs * hi)
        return (b - a) / max(self.at(b) - self.at(a), 1e-9)

    def first_at_or_after(self, done: int) -> Sample:
        return next(s for s in self.samples if s.completed >= done)


async def _stats(conn: asyncpg.Connection, prefix: str) -> list[Any]:
    return list(await conn.fetch(
        "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, vacuum_count,"
        " pg_total_relation_size(relid) / 1024 AS size_kib"
        " FROM pg_stat_user_tables WHERE relname = ANY($1::text[])",
        [f"{prefix}jobs", f"{prefix}journal"]))


async def soak(dsn: str, jobs: int, *, workers: int = 2, concurrency: int = 10,
               interval: float = 1.0, vacuum_every: float = 0.0, logdir: Path,
               table_settings: str = "", give_up_after: float = 3600.0) -> SoakResult:
    prefix = f"soak{secrets.token_hex(4)}_"
    conn = await asyncpg.connect(dsn)
    procs: list[WorkerProc] = []
    try:
        server = {name: await conn.fetchval(f"SHOW {name}") for name in (
            "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor",
            "autovacuum_vacuum_cost_limit", "autovacuum_vacuum_cost_delay")}
        async with venturi.Queue.connect(dsn, prefix=prefix, max_size=4) as queue:
            await queue.migrate()
            if table_settings:
                for table in ("jobs", "journal"):
                    await conn.execute(f"ALTER TABLE {prefix}{table} SET ({table_settings})")
            began = time.monotonic()
            for start in range(0, jobs, 1000):
                await queue.enqueue_many([Noop(n=i) for i in range(start, min(jobs, start + 1000))])
            enqueue_seconds = time.monotonic() - began
        if table_settings:
            server["table settings"] = table_settings
        result = SoakResult(prefix, jobs, workers, concurrency, enqueue_seconds, server=server)
        names = {f"{prefix}jobs": "jobs", f"{prefix}journal": "journal"}
        t0 = time.monotonic()
        procs = [WorkerProc(dsn, prefix, logdir, name=f"soak-{i}", concurrency=concurrency)
                 for i in range(workers)]
        last_vacuum = t0
        while True:
            completed = await conn.fetchval(
                f"SELECT count(*) FROM {prefix}jobs WHERE status = 'completed'")
            rows = await _stats(conn, prefix)
            sample = Sample(
                t=time.monotonic() - t0, completed=completed,
                rss_kib=[p.rss_kib() for p in procs],
                dead={names[r["relname"]]: r["n_dead_tup"] for r in rows},
                live={names[r["relname"]]: r["n_live_tup"] for r in rows},
                autovacuums={names[r["relname"]]: r["autovacuum_count"] for r in rows},
                vacuums={names[r["relname"]]: r["vacuum_count"] for r in rows},
                size_kib={names[r["relname"]]: r["size_kib"] for r in rows})
            result.samples.append(sample)
            if completed >= jobs:
                if vacuum_every:  # one last pass, so a short run vacuums at least once too
                    await conn.execute(f"VACUUM {prefix}jobs, {prefix}journal")
                    result.driver_vacuums += 1
                break
            dead = [p for p in procs if not p.alive()]
            if dead:
                raise RuntimeError(f"worker exited with {dead[0].returncode}: "
                                   f"{dead[0].errors()[-2000:]}")
            if sample.t > give_up_after:
                raise RuntimeError(f"{completed} of {jobs} jobs done in {give_up_after} s")
            if vacuum_every and time.monotonic() - last_vacuum >= vacuum_every:
                await conn.execute(f"VACUUM {prefix}jobs, {prefix}journal")
                result.driver_vacuums += 1
                last_vacuum = time.monotonic()
            await asyncio.sleep(interval)
        for p in procs:
            p.terminate()
        result.exit_codes = [await asyncio.to_thread(p.wait, 60) for p in procs]
        result.left_claimed = await conn.fetchval(
            f"SELECT count(*) FROM {prefix}jobs WHERE status = 'claimed'")
        result.not_completed = await conn.fetchval(
            f"SELECT count(*) FROM {prefix}jobs WHERE status <> 'completed'")
        return result
    finally:
        for p in procs:
            if p.alive():
                p.kill9()
        for statement in drop_statements(prefix):
            await conn.execute(statement)
        await conn.close()


def _mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


def render(r: SoakResult, command: str, note: str = "") -> str:
    first, last = r.rate(0.0, 0.1), r.rate(0.9, 1.0)
    start = r.first_at_or_after(max(1, r.jobs // 100))  # warmed up: 1 % done
    end = r.samples[-1]
    peak_dead = {t: max(s.dead.get(t, 0) for s in r.samples) for t in ("jobs", "journal")}
    lines = [
        "## Soak", "",
        f"Command: `{command}`", "",
        "```",
        f"jobs                      {r.jobs}",
        f"workers                   {r.workers} x concurrency {r.concurrency}",
        f"enqueue (all, up front)   {r.enqueue_seconds:.1f} s",
        f"drain wall time           {end.t:.1f} s ({r.jobs / end.t:.0f} jobs/s overall)",
        f"throughput first 10 %     {first:.0f} jobs/s",
        f"throughput last 10 %      {last:.0f} jobs/s ({(last / first - 1) * 100:+.0f} %)",
        "worker RSS start (1 %)    " + ", ".join(_mib(k) + " MiB" for k in start.rss_kib),
        "worker RSS end            " + ", ".join(_mib(k) + " MiB" for k in end.rss_kib),
        f"dead tuples peak          jobs {peak_dead['jobs']}, journal {peak_dead['journal']}",
        f"dead tuples at end        jobs {end.dead.get('jobs')}, journal {end.dead.get('journal')}",
        f"autovacuum runs           jobs {end.autovacuums.get('jobs')},"
        f" journal {end.autovacuums.get('journal')}",
        f"driver VACUUMs            {r.driver_vacuums}",
        f"table size at end         jobs {end.size_kib.get('jobs', 0) / 1024:.1f} MiB,"
        f" journal {end.size_kib.get('journal', 0) / 1024:.1f} MiB",
        f"not completed / claimed   {r.not_completed} / {r.left_claimed}",
        f"worker exit codes         {r.exit_codes}",
        "server                    " + ", ".join(f"{k}={v}" for k, v in r.server.items()),
        "```", "",
        "| progress | jobs/s in window | RSS MiB (per worker) | dead tuples jobs | dead tuples"
        " journal | jobs table MiB |",
        "|---|---|---|---|---|---|",
    ]
    for decile in range(10):
        lo, hi = decile / 10, (decile + 1) / 10
        s = r.first_at_or_after(round(r.jobs * hi))
        lines.append(
            f"| {int(lo * 100)}-{int(hi * 100)} % | {r.rate(lo, hi):.0f} | "
            + " / ".join(_mib(k) for k in s.rss_kib)
            + f" | {s.dead.get('jobs')} | {s.dead.get('journal')} |"
            f" {s.size_kib.get('jobs', 0) / 1024:.1f} |")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


async def _set_naptime(dsn: str, naptime: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"ALTER SYSTEM SET autovacuum_naptime = '{naptime}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", default=DEFAULT_DSN)
    p.add_argument("--jobs", type=int, default=200_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--vacuum-every", type=float, default=0.0)
    p.add_argument("--table-settings", default="",
                   help="storage parameters for both tables after migrate, e.g."
                        " autovacuum_vacuum_scale_factor=0.01")
    p.add_argument("--private", action="store_true",
                   help="run on a throwaway private cluster (autovacuum on) instead of --dsn")
    p.add_argument("--naptime", help="with --private: autovacuum_naptime, e.g. 10s")
    p.add_argument("--out", type=Path, default=HERE / "results-soak.md")
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    logdir = Path(tempfile.mkdtemp(prefix="venturi-soak-"))

    def run(dsn: str) -> SoakResult:
        return asyncio.run(soak(dsn, args.jobs, workers=args.workers,
                                concurrency=args.concurrency, interval=args.interval,
                                vacuum_every=args.vacuum_every, logdir=logdir,
                                table_settings=args.table_settings))

    if args.private:
        from tests.faults_cluster import PrivateCluster

        cluster = PrivateCluster()
        try:
            cluster.start()
            if args.naptime:
                asyncio.run(_set_naptime(cluster.dsn, args.naptime))
            result = run(cluster.dsn)
        finally:
            cluster.destroy()
    else:
        result = run(args.dsn)
    command = shlex.join(["python", "-m", "benchmarks.soak", *argv])
    text = render(result, command, args.note)
    args.out.write_text(text)
    print(text)
    ok = result.not_completed == 0 and result.left_claimed == 0 and all(
        c == 0 for c in result.exit_codes)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
