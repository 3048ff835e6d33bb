"""Fault-injection run: real ``venturi worker`` processes over thousands of jobs while
workers are killed with SIGKILL (and replaced), PostgreSQL is restarted once and worker
backends are terminated with ``pg_terminate_backend``; the survivors get SIGTERM at the
end. Then the promises of DESIGN §4 are checked on what the database and the side
table recorded: nothing lost, one settlement per job, hole-free journals, nothing left
claimed, survivors exit 0, and every completion was a run the side table saw.

    python -m benchmarks.chaos --size small   # ~1,500 jobs, what CI runs (faults test)
    python -m benchmarks.chaos --size full    # 20,000 jobs; writes benchmarks/results-chaos.md

It needs a private PostgreSQL cluster (tests/faults_cluster.py: root, the postgres OS
user and the server binaries), never the shared server: it restarts the database.

Jobs are produced at a steady rate over the run's window, so the faults, spread over
the same window on a fixed schedule, always land on a queue with work in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

import venturi
from tests.chaos.tasks import SIDE_DSN, SIDE_TABLE, Step, side_ddl

from .harness import drop_statements
from .workers import WorkerProc

HERE = Path(__file__).resolve().parent
WORKER_APP = "chaos-worker"
SIDE_APP = "chaos-side"


@dataclass(frozen=True)
class Size:
    jobs: int
    window: float  # seconds over which the jobs are produced and the faults injected
    workers: int = 4
    concurrency: int = 4
    kill_every: float = 1.5  # seconds between kills
    terminations: int = 3  # pg_terminate_backend rounds (LISTEN only, then everything, ...)
    settle_timeout: float = 90.0  # after the window, for every job to complete


SIZES = {
    "small": Size(jobs=1_500, window=12.0, kill_every=1.5, terminations=3),
    "full": Size(jobs=20_000, window=150.0, kill_every=2.5, terminations=10),
}


@dataclass
class ChaosResult:
    size: Size
    kills: int = 0
    replacements_same_name: int = 0
    replacements_new_name: int = 0
    restarts: int = 0
    termination_rounds: int = 0
    terminated_backends: int = 0
    terminated_listen: int = 0
    refused_starts: int = 0  # a same-name replacement that found the old lock still held
    unexpected_exits: list[str] = field(default_factory=list)
    completed: int = 0
    lost: int = 0
    double_settlements: int = 0
    journal_holes: int = 0
    left_claimed: int = 0
    survivor_exit_codes: list[int | None] = field(default_factory=list)
    claims: int = 0  # sum of run_count: every claim is an execution started
    executions: int = 0  # side-table rows: executions that got as far as recording
    duplicate_epochs: int = 0  # one (job, run_no) recorded twice
    unrecorded_completions: int = 0  # completed by a run the side table never saw
    recovered_logged: int = 0
    settle_refused_logged: int = 0
    wall: float = 0.0

    @property
    def extra_executions(self) -> int:
        return self.executions - self.size.jobs

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.double_settlements == 0 and self.journal_holes == 0
                and self.left_claimed == 0 and self.duplicate_epochs == 0
                and self.unrecorded_completions == 0 and not self.unexpected_exits
                and all(c == 0 for c in self.survivor_exit_codes))

    def block(self) -> str:
        s = self.size
        return "\n".join([
            f"jobs                     {s.jobs} (produced over {s.window:.0f} s)",
            f"workers                  {s.workers} x concurrency {s.concurrency}"
            " (venturi worker --app tests.chaos.tasks)",
            f"kills (SIGKILL)          {self.kills} (replaced: {self.replacements_same_name}"
            f" same name, {self.replacements_new_name} new name;"
            f" {self.refused_starts} same-name starts refused and retried)",
            f"postgres restarts        {self.restarts}",
            f"backend terminations     {self.terminated_backends} backends in"
            f" {self.termination_rounds} rounds ({self.terminated_listen} LISTEN)",
            f"lost                     {self.lost}",
            f"double settlements       {self.double_settlements}",
            f"journal holes            {self.journal_holes}",
            f"left claimed             {self.left_claimed}",
            f"survivor exit codes      {self.survivor_exit_codes}",
            f"unexpected exits         {len(self.unexpected_exits)}",
            f"claims (executions)      {self.claims} -> {self.claims - s.jobs} beyond one per job",
            f"recorded executions      {self.executions} -> extra executions"
            f" {self.extra_executions} ({self.extra_executions / s.jobs * 100:.2f} %)",
            f"duplicate epochs         {self.duplicate_epochs}",
            f"unrecorded completions   {self.unrecorded_completions}",
            f"logged job_recovered     {self.recovered_logged}",
            f"logged settle_refused    {self.settle_refused_logged}",
            f"wall time                {self.wall:.1f} s",
        ])


def tagged(dsn: str, application: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={application}"


class Driver:
    """The driver's own connection, reopened after the database went away.

    The producer and the fault injector share it, so one operation runs at a time: an
    asyncpg connection takes one query at a time, and one coroutine's reconnect must not
    terminate the connection under the other's query (asyncpg then fails with an
    AttributeError from inside the call, not a connection error)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = tagged(dsn, "chaos-driver")
        self.conn: asyncpg.Connection | None = None
        self._turn = asyncio.Lock()

    async def run(self, op: Callable[[asyncpg.Connection], Awaitable[Any]],
                  patience: float = 60.0) -> Any:
        async with self._turn:
            return await self._run(op, patience)

    async def _run(self, op: Callable[[asyncpg.Connection], Awaitable[Any]],
                   patience: float) -> Any:
        deadline = time.monotonic() + patience
        while True:
            try:
                if self.conn is None or self.conn.is_closed():
                    self.conn = await asyncpg.connect(self.dsn, timeout=5)
                return await op(self.conn)
            except (OSError, asyncpg.PostgresConnectionError,
                    asyncpg.InterfaceError, asyncpg.CannotConnectNowError,
                    asyncpg.AdminShutdownError, asyncpg.InternalClientError, TimeoutError):
                if self.conn is not None:
                    self.conn.terminate()
                    self.conn = None
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.run(lambda c: c.fetchval(sql, *args))

    async def close(self) -> None:
        async with self._turn:
            if self.conn is not None:
                await self.conn.close()


class Fleet:
    """The worker processes: kills, replacements, and the ones that died on their own."""

    def __init__(self, dsn: str, prefix: str, size: Size, logdir: Path,
                 result: ChaosResult) -> None:
        self.dsn, self.prefix, self.size, self.logdir = dsn, prefix, size, logdir
        self.result = result
        self.env = {SIDE_DSN: tagged(dsn, SIDE_APP), SIDE_TABLE: f"{prefix}side"}
        self.procs: dict[str, WorkerProc] = {}
        self.all: list[WorkerProc] = []
        self.serial = 0

    def start(self, name: str) -> None:
        proc = WorkerProc(tagged(self.dsn, WORKER_APP), self.prefix, self.logdir, name=name,
                          concurrency=self.size.concurrency, grace="10s", env=self.env)
        self.procs[name] = proc
        self.all.append(proc)

    def start_all(self) -> None:
        for _ in range(self.size.workers):
            self.start(self.new_name())

    def new_name(self) -> str:
        self.serial += 1
        return f"chaos-{self.serial}"

    def kill_one(self, rng: random.Random) -> None:
        alive = [n for n, p in self.procs.items() if p.alive()]
        if not alive:
            return
        name = rng.choice(alive)
        self.procs[name].kill9()
        self.result.kills += 1
        # Half the replacements take the dead worker's name (boot recovery re-pends its
        # claims at once), half a new one (its claims wait for their leases to expire).
        if self.result.kills % 2:
            self.result.replacements_same_name += 1
            self.start(name)
        else:
            self.result.replacements_new_name += 1
            del self.procs[name]
            self.start(self.new_name())

    def check(self) -> None:
        """Restart workers that exited without being told to."""
        for name, proc in list(self.procs.items()):
            if proc.alive():
                continue
            if "held by a live worker" in proc.errors():
                self.result.refused_starts += 1  # the killed process's lock was not yet freed
            else:
                self.result.unexpected_exits.append(
                    f"{name} exited {proc.returncode}: {proc.errors()[-500:]}")
            self.start(name)

    async def stop(self, driver: Driver) -> None:
        # A replacement still importing has no signal handler yet, and SIGTERM would kill
        # it outright (-15): wait until every survivor has booted (registered itself).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.check()
            pids = set(await driver.run(lambda c: c.fetchval(
                f"SELECT coalesce(array_agg(pid), '{{}}') FROM {self.prefix}workers")))
            if all(p.pid in pids for p in self.procs.values()):
                break
            await asyncio.sleep(0.1)
        survivors = [p for p in self.procs.values() if p.alive()]
        for proc in survivors:
            proc.terminate()
        self.result.survivor_exit_codes = [
            await asyncio.to_thread(p.wait, 60) for p in survivors]

    def kill_everything(self) -> None:
        for proc in self.all:
            if proc.alive():
                proc.kill9()

    def count_logged(self, event: str) -> int:
        marker = (f'"event": "{event}"', f'"event":"{event}"')
        return sum(line.count(marker[0]) + line.count(marker[1])
                   for line in (p.output() for p in self.all))


async def _terminate(driver: Driver, listen_only: bool) -> tuple[int, int]:
    where = "application_name = $1 AND query ILIKE 'LISTEN%'" if listen_only else (
        "application_name IN ($1, $2)")
    args = [WORKER_APP] if listen_only else [WORKER_APP, SIDE_APP]
    rows = await driver.run(lambda c: c.fetch(
        "SELECT pg_terminate_backend(pid) AS done, query ILIKE 'LISTEN%' AS listen"
        f" FROM pg_stat_activity WHERE {where}", *args))
    return (sum(1 for r in rows if r["done"]),
            sum(1 for r in rows if r["done"] and r["listen"]))


async def _produce(queue: venturi.Queue, driver: Driver, prefix: str, size: Size) -> None:
    """Enqueue the jobs at a steady rate over the window, exactly once each: an enqueue
    whose commit is in doubt (the database went away) is checked before it is repeated."""
    batches = max(1, int(size.window / 0.1))
    per = -(-size.jobs // batches)
    began = time.monotonic()
    for b, lo in enumerate(range(0, size.jobs, per)):
        hi = min(size.jobs, lo + per)
        while True:
            try:
                await queue.enqueue_many([Step(n=n) for n in range(lo, hi)])
                break
            except venturi.VenturiError:
                there = await driver.fetchval(
                    f"SELECT count(*) FROM {prefix}jobs WHERE (payload->>'n')::int >= $1"
                    " AND (payload->>'n')::int < $2", lo, hi)
                if there == hi - lo:
                    break
                await asyncio.sleep(0.2)
        await asyncio.sleep(max(0.0, began + (b + 1) * 0.1 - time.monotonic()))


async def _inject(fleet: Fleet, driver: Driver, restart: Callable[[], None], size: Size,
                  result: ChaosResult, rng: random.Random) -> None:
    """The fault schedule over the window: kills every ``kill_every`` s, the restart at
    the middle, termination rounds spread evenly (alternating LISTEN-only and all)."""
    events: list[tuple[float, str]] = []
    t = size.kill_every
    while t < size.window:
        events.append((t, "kill"))
        t += size.kill_every
    events.append((size.window * 0.5, "restart"))
    for i in range(size.terminations):
        events.append((size.window * (i + 0.7) / (size.terminations + 0.4), "terminate"))
    events.sort()
    began = time.monotonic()
    for at, what in events:
        while time.monotonic() - began < at:
            fleet.check()
            await asyncio.sleep(0.05)
        if what == "kill":
            fleet.kill_one(rng)
        elif what == "restart":
            await asyncio.to_thread(restart)
            result.restarts += 1
        else:
            listen_only = result.termination_rounds % 2 == 0
            n, listen = await _terminate(driver, listen_only)
            result.termination_rounds += 1
            result.terminated_backends += n
            result.terminated_listen += listen


async def verify(driver: Driver, prefix: str, result: ChaosResult) -> None:
    jobs, journal, side = f"{prefix}jobs", f"{prefix}journal", f"{prefix}side"
    q = driver.fetchval
    result.completed = await q(f"SELECT count(*) FROM {jobs} WHERE status = 'completed'")
    result.lost = result.size.jobs - result.completed
    result.double_settlements = await q(
        f"SELECT count(*) FROM (SELECT job_id FROM {journal} WHERE outcome = 'completed'"
        " GROUP BY job_id HAVING count(*) > 1) d")
    # Rule 5: the execution entries of a job are run numbers 1..run_count, one each.
    result.journal_holes = await q(
        f"SELECT count(*) FROM {jobs} j LEFT JOIN LATERAL ("
        f" SELECT count(*) AS n, count(DISTINCT run_no) AS d, min(run_no) AS lo,"
        f" max(run_no) AS hi FROM {journal} e"
        " WHERE e.job_id = j.id AND e.outcome NOT IN ('merged', 'redriven')) e ON true"
        " WHERE e.n <> j.run_count OR e.d <> j.run_count"
        " OR (j.run_count > 0 AND (e.lo <> 1 OR e.hi <> j.run_count))")
    result.left_claimed = await q(f"SELECT count(*) FROM {jobs} WHERE status = 'claimed'")
    result.claims = await q(f"SELECT coalesce(sum(run_count), 0) FROM {jobs}")
    result.executions = await q(f"SELECT count(*) FROM {side}")
    result.duplicate_epochs = await q(
        f"SELECT count(*) FROM (SELECT 1 FROM {side} GROUP BY job_id, run_no"
        " HAVING count(*) > 1) d")
    result.unrecorded_completions = await q(
        f"SELECT count(*) FROM {jobs} j WHERE status = 'completed' AND NOT EXISTS ("
        f" SELECT 1 FROM {side} s WHERE s.job_id = j.id AND s.run_no = j.run_count)")


async def chaos(dsn: str, restart: Callable[[], None], size: Size, *, logdir: Path,
                seed: int | None = None) -> ChaosResult:
    """One run on the cluster at ``dsn``; ``restart`` restarts it (blocking)."""
    rng = random.Random(seed)
    prefix = f"chaos{secrets.token_hex(4)}_"
    result = ChaosResult(size)
    driver = Driver(dsn)
    fleet = Fleet(dsn, prefix, size, logdir, result)
    began = time.monotonic()
    try:
        async with venturi.Queue.connect(tagged(dsn, "chaos-driver"), prefix=prefix,
                                         max_size=2) as queue:
            await queue.migrate()
            await driver.run(lambda c: c.execute(side_ddl(f"{prefix}side")))
            fleet.start_all()
            await asyncio.gather(_produce(queue, driver, prefix, size),
                                 _inject(fleet, driver, restart, size, result, rng))
        deadline = time.monotonic() + size.settle_timeout
        while time.monotonic() < deadline:
            fleet.check()
            done = await driver.fetchval(
                f"SELECT count(*) FROM {prefix}jobs WHERE status = 'completed'")
            if done >= size.jobs:
                break
            await asyncio.sleep(0.2)
        await fleet.stop(driver)
        result.wall = time.monotonic() - began
        await verify(driver, prefix, result)
        result.recovered_logged = fleet.count_logged("job_recovered")
        result.settle_refused_logged = fleet.count_logged("settle_refused")
        return result
    finally:
        fleet.kill_everything()
        for statement in drop_statements(prefix, "side"):
            await driver.run(lambda c, sql=statement: c.execute(sql))  # type: ignore[misc]
        await driver.close()


def main(argv: list[str]) -> int:
    from tests.faults_cluster import PrivateCluster, unavailable_reason

    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--seed", type=int)
    p.add_argument("--out", type=Path, help="default: benchmarks/results-chaos.md for full")
    args = p.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"cannot make a private PostgreSQL cluster: {reason}", file=sys.stderr)
        return 2
    cluster = PrivateCluster()
    try:
        cluster.start()
        logdir = Path(tempfile.mkdtemp(prefix="venturi-chaos-"))
        result = asyncio.run(chaos(cluster.dsn, cluster.restart, SIZES[args.size],
                                   logdir=logdir, seed=args.seed))
    finally:
        cluster.destroy()
    command = shlex.join(["python", "-m", "benchmarks.chaos", *argv])
    text = (f"## Fault-injection run ({args.size})\n\nCommand: `{command}`\n\n"
            f"```\n{result.block()}\n```\n")
    print(text)
    print(f"worker logs: {logdir}")
    out = args.out or (HERE / "results-chaos.md" if args.size == "full" else None)
    if out is not None:
        out.write_text(text)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
