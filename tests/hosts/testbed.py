"""A test network with its database, workers and producer, and the checks every
scenario ends with (what the database, the runs' records and the producer's
acknowledgements say), as used by tests/hosts/ and ``python -m benchmarks.hosts``.

Everything made here is removed by ``close()``: the processes first (a namespace lives
on while a process is inside it), then the clusters, then the namespaces.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from ..faults_cluster import unavailable_reason as cluster_unavailable
from . import tasks
from .fleet import HostProcess, Run, read_runs, starts_per_job, venturi_worker
from .netns import Network, sweep
from .netns import unavailable_reason as netns_unavailable
from .pg import HostCluster


def unavailable_reason() -> str | None:
    return netns_unavailable() or cluster_unavailable()


@dataclass
class Result:
    """What one scenario run did and what the checks found (``ok``: every promise held)."""

    jobs: int
    completed: int = 0
    lost: int = 0  # acknowledged enqueues with no job, plus jobs never completed
    duplicated: int = 0  # numbers enqueued more than once
    double_settlements: int = 0
    journal_holes: int = 0
    left_claimed: int = 0
    executions: int = 0
    duplicate_epochs: int = 0
    unrecorded_completions: int = 0
    exit_codes: list[int | None] = field(default_factory=list)
    in_doubt_found: int = 0  # enqueues that raised but had committed
    wall: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)  # reported
    checks: dict[str, Any] = field(default_factory=dict)  # for the scenario's own asserts

    @property
    def extra_executions(self) -> int:
        return self.executions - self.jobs

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.duplicated == 0 and self.double_settlements == 0
                and self.journal_holes == 0 and self.left_claimed == 0
                and self.completed == self.jobs and self.duplicate_epochs == 0
                and self.unrecorded_completions == 0 and bool(self.exit_codes)
                and all(c == 0 for c in self.exit_codes))

    def lines(self) -> list[str]:
        rows = [
            ("jobs", f"{self.jobs}"),
            ("completed", f"{self.completed}"),
            ("lost", f"{self.lost}"),
            ("duplicated enqueues", f"{self.duplicated}"),
            ("double settlements", f"{self.double_settlements}"),
            ("journal holes", f"{self.journal_holes}"),
            ("left claimed", f"{self.left_claimed}"),
            ("executions", f"{self.executions} -> extra executions {self.extra_executions}"),
            ("duplicate epochs", f"{self.duplicate_epochs}"),
            ("unrecorded completions", f"{self.unrecorded_completions}"),
            ("enqueues in doubt, found", f"{self.in_doubt_found}"),
            ("worker exit codes", f"{self.exit_codes}"),
            *((k, str(v)) for k, v in self.figures.items()),
            ("wall time", f"{self.wall:.1f} s"),
        ]
        return [f"{k:<30} {v}" for k, v in rows]


class Testbed:
    """``Testbed(["db", "app", "w1", ...], logdir)``: ``open_network()``, a ``database``,
    workers and a producer; ``await close()`` removes it all."""

    __test__ = False  # not a test class, whatever pytest makes of the name

    def __init__(self, hosts: Sequence[str], logdir: Path) -> None:
        sweep()
        self.net = Network(hosts)
        self.logdir = logdir
        self.records = logdir / "records"
        self.records.mkdir(parents=True, exist_ok=True)
        self.acks = logdir / "acks"
        self.prefix = f"hosts{secrets.token_hex(3)}_"
        self.clusters: list[HostCluster] = []
        self.procs: list[HostProcess] = []
        self.workers: dict[str, HostProcess] = {}
        self.producer: HostProcess | None = None
        self.primary: HostCluster | None = None
        self.driver: asyncpg.Connection | None = None
        self.began = time.monotonic()

    def open_network(self) -> None:
        self.net.create()

    def database(self, host: str, **options: Any) -> HostCluster:
        cluster = HostCluster(self.net, host, **options)
        self.clusters.append(cluster)
        return cluster

    async def use_primary(self, cluster: HostCluster) -> None:
        """Read and check through ``cluster``'s unix socket from now on."""
        if self.driver is not None:
            self.driver.terminate()
        self.primary = cluster
        self.driver = await asyncpg.connect(cluster.local_dsn, timeout=10)

    async def q(self, sql: str, *args: Any) -> Any:
        assert self.driver is not None
        return await self.driver.fetchval(sql, *args)

    async def migrate(self) -> None:
        import venturi

        assert self.primary is not None
        async with venturi.Queue.connect(self.primary.local_dsn, prefix=self.prefix,
                                         max_size=1) as queue:
            await queue.migrate()

    def start_worker(self, host: str, dsn: str, *, concurrency: int = 8,
                     extra: list[str] | None = None) -> HostProcess:
        proc = venturi_worker(self.net, host, dsn, self.prefix, self.logdir, name=host,
                              concurrency=concurrency, records=self.records, extra=extra)
        self.procs.append(proc)
        self.workers[host] = proc
        return proc

    def spawn(self, host: str, argv: list[str], label: str) -> HostProcess:
        proc = HostProcess(self.net, host, argv, self.logdir, label)
        self.procs.append(proc)
        return proc

    async def require_standby(self) -> None:
        """Make the streaming standby synchronous: commits wait until it has them."""
        async def streaming() -> bool:
            return bool(await self.q("SELECT count(*) FROM pg_stat_replication"
                                     " WHERE state = 'streaming'"))
        await self.wait(streaming, 60, "the standby to stream")
        await self.q("ALTER SYSTEM SET synchronous_standby_names = '*'")
        await self.q("SELECT pg_reload_conf()")

        async def synchronous() -> bool:
            return bool(await self.q("SELECT count(*) FROM pg_stat_replication"
                                     " WHERE sync_state = 'sync'"))
        await self.wait(synchronous, 60, "the standby to be synchronous")

    async def acknowledged_settlements_lost(self) -> dict[str, int]:
        """Every settlement a worker saw committed (``job_completed`` and ``job_retried``,
        logged after the commit returned; ``--log-level debug`` logs each completion) must
        be in the journal of the database as it is now."""
        wanted = {"job_completed": "completed", "job_retried": "retried"}
        acked = {(str(e["job_id"]), int(str(e["run_no"])), outcome)
                 for proc in self.workers.values() for event, outcome in wanted.items()
                 for e in proc.events(event)}
        rows = await self.driver.fetch(  # type: ignore[union-attr]
            f"SELECT job_id::text, run_no, outcome FROM {self.prefix}journal")
        journal = {(r["job_id"], r["run_no"], r["outcome"]) for r in rows}
        lost = acked - journal
        # How a lost settlement shows: the run the worker saw settle is, on the new
        # primary, a run whose lease expired.
        stale = {(j, n, "stale-recovered") for j, n, _ in lost} & journal
        return {"acknowledged": len(acked), "lost": len(lost), "stale_recovered": len(stale)}

    def start_producer(self, host: str, dsn: str, jobs: int, window: float,
                       slow_every: int, until: Path | None = None) -> HostProcess:
        """``until``: after ``jobs``, the producer goes on at its pace until that file
        exists (``finish`` then reads how many it made)."""
        argv = [sys.executable, "-m", "tests.hosts.producer", "--dsn", dsn, "--prefix",
                self.prefix, "--jobs", str(jobs), "--window", str(window), "--slow-every",
                str(slow_every), "--acks", str(self.acks)]
        if until is not None:
            argv += ["--until", str(until)]
        self.producer = HostProcess(self.net, host, argv, self.logdir, "producer")
        self.procs.append(self.producer)
        return self.producer

    async def wait(self, condition: Any, timeout: float, what: str,
                   interval: float = 0.1) -> float:
        """Poll ``condition`` (sync or async) until true; the seconds it took."""
        began = time.monotonic()
        while True:
            value = condition()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return time.monotonic() - began
            self.check_alive()
            if time.monotonic() - began > timeout:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                                     f" (logs in {self.logdir})")
            await asyncio.sleep(interval)

    def check_alive(self) -> None:
        for proc in self.workers.values():
            if not proc.alive():
                raise AssertionError(f"worker {proc.label} exited {proc.returncode}:"
                                     f" {proc.errors()[-800:]}")
        if self.producer is not None and self.producer.returncode not in (None, 0):
            raise AssertionError(f"producer exited {self.producer.returncode}:"
                                 f" {self.producer.errors()[-800:]}")

    async def workers_registered(self) -> bool:
        names = await self.q(f"SELECT coalesce(array_agg(name), '{{}}') FROM {self.prefix}workers")
        return set(self.workers) <= set(names)

    async def completed(self) -> int:
        count: int = await self.q(
            f"SELECT count(*) FROM {self.prefix}jobs WHERE status = 'completed'")
        return count

    def runs(self) -> list[Run]:
        return read_runs(self.records)

    async def finish(self, jobs: int | None, timeout: float) -> Result:
        """Wait for the producer and every job, stop the workers (SIGTERM), then check.
        ``jobs`` None: as many as the producer says it made (``start_producer``'s
        ``until``)."""
        assert self.producer is not None
        producer = self.producer
        await self.wait(lambda: not producer.alive(), timeout, "the producer to finish")
        if jobs is None:
            made = re.search(r"^produced (\d+) jobs", producer.output(), re.MULTILINE)
            assert made is not None, f"the producer said nothing: {producer.errors()[-800:]}"
            jobs = int(made[1])

        # Every job there is, done: with asynchronous replication some may be gone.
        async def all_done() -> bool:
            left = await self.q(f"SELECT count(*) FROM {self.prefix}jobs"
                                " WHERE status IN ('pending', 'claimed')")
            return left == 0 and await self.completed() > 0
        await self.wait(all_done, timeout, f"all {jobs} jobs to complete")
        result = Result(jobs)
        for proc in self.workers.values():
            proc.terminate()
        result.exit_codes = [await asyncio.to_thread(p.wait, 60) for p in self.workers.values()]
        result.wall = time.monotonic() - self.began
        await self.verify(result)
        return result

    async def verify(self, result: Result) -> None:
        jobs, journal = f"{self.prefix}jobs", f"{self.prefix}journal"
        acked: set[int] = set()
        for line in self.acks.read_text().splitlines() if self.acks.exists() else []:
            what, *numbers = line.split()
            acked.update(int(n) for n in numbers)
            if what == "found":
                result.in_doubt_found += len(numbers)
        rows = await self.driver.fetch(  # type: ignore[union-attr]
            f"SELECT (payload->>'n')::int AS n, status FROM {jobs} WHERE kind = $1",
            tasks.Work.__task__.kind)
        per_n = Counter(r["n"] for r in rows)
        result.completed = sum(1 for r in rows if r["status"] == "completed")
        result.duplicated = sum(c - 1 for c in per_n.values() if c > 1)
        completed_numbers = {r["n"] for r in rows if r["status"] == "completed"}
        # Lost: a number with no completed job (an acknowledged enqueue gone with the old
        # primary, a job never finished); the acknowledged ones are also counted apart.
        result.lost = len(set(range(result.jobs)) - completed_numbers)
        result.figures["acknowledged enqueues lost"] = len(acked - set(per_n))
        result.double_settlements = await self.q(
            f"SELECT count(*) FROM (SELECT job_id FROM {journal} WHERE outcome = 'completed'"
            " GROUP BY job_id HAVING count(*) > 1) d")
        # The execution entries of a job are run numbers 1..run_count, one each.
        result.journal_holes = await self.q(
            f"SELECT count(*) FROM {jobs} j LEFT JOIN LATERAL ("
            f" SELECT count(*) AS n, count(DISTINCT run_no) AS d, min(run_no) AS lo,"
            f" max(run_no) AS hi FROM {journal} e"
            " WHERE e.job_id = j.id AND e.outcome NOT IN ('merged', 'redriven')) e ON true"
            " WHERE e.n <> j.run_count OR e.d <> j.run_count"
            " OR (j.run_count > 0 AND (e.lo <> 1 OR e.hi <> j.run_count))")
        result.left_claimed = await self.q(f"SELECT count(*) FROM {jobs} WHERE status = 'claimed'")
        runs = self.runs()
        starts = [r for r in runs if r.event == "start"]
        result.executions = len(starts)
        epochs = Counter((r.job_id, r.run_no) for r in starts)
        result.duplicate_epochs = sum(1 for c in epochs.values() if c > 1)
        finals = await self.driver.fetch(  # type: ignore[union-attr]
            f"SELECT id, run_count FROM {jobs} WHERE status = 'completed'")
        result.unrecorded_completions = sum(
            1 for r in finals if (r["id"], r["run_count"]) not in epochs)
        result.figures.setdefault("jobs run more than once", sum(
            1 for c in starts_per_job(runs).values() if c > 1))

    async def close(self) -> None:
        for proc in self.procs:
            proc.kill()
        if self.driver is not None:
            self.driver.terminate()
        for cluster in self.clusters:
            cluster.destroy()
        self.net.destroy()
