"""Scale-out: worker processes on one table, and what their statements wait on.

Besides the drain rates, the worker drains record what would tell a lock convoy from a
commit convoy from a machine that has run out of cores: what the backends running the
claim and the settle statements wait on (``pg_stat_activity``, sampled), how many
transactions the database committed per 1,000 jobs (``pg_stat_database``), how busy the
host's CPUs were and how many tasks were runnable (``/proc/stat``), and how much CPU the
worker processes themselves used (``/proc/PID/stat``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from ..harness import Bench, Figure, scenario
from ..tasks import KIND
from .worker import Drain, _processes, take_turns

# pg_stat_activity keeps the first track_activity_query_size bytes (1 kB by default) of
# a statement: the claim's first CTEs, which name the table; the settles' first lines.
STATEMENT_WAITS = """
SELECT CASE WHEN query LIKE 'WITH kinds AS (%' THEN 'claim' ELSE 'settle' END,
       coalesce(wait_event_type || ':' || wait_event, 'on CPU')
FROM pg_stat_activity
WHERE state = 'active' AND pid <> pg_backend_pid()
  AND (query LIKE 'WITH kinds AS (%SKIP LOCKED%' OR query LIKE 'WITH upd AS (%')
  AND query LIKE '%' || $1 || 'jobs%'
"""
COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
# The span of the middle 80 % of the drain's completions, by the settles' commit times:
# the rate once every process is running, without the boots and the tail.
# With the first and the last completion (seconds since the epoch: the server shares
# this host's clock), how long the boots took to the first settle and the tail lasted.
MIDDLE = """
SELECT extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY finished_at)
                        - percentile_disc(0.1) WITHIN GROUP (ORDER BY finished_at)),
       extract(epoch FROM min(finished_at)), extract(epoch FROM max(finished_at)),
       extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY finished_at))
FROM {p}jobs WHERE status = 'completed' AND kind = $1
"""


def _cpu_times() -> tuple[int, int, int]:
    """(busy, total) jiffies of all CPUs, and the tasks runnable now (/proc/stat)."""
    busy = total = running = 0
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            total = sum(values[:8])
            busy = total - values[3] - values[4]  # less idle and iowait
        elif line.startswith("procs_running "):
            running = int(line.split()[1])
    return busy, total, running


@dataclass
class Sampled:
    """What one kind of drain waited on, summed over its runs."""

    waits: dict[str, dict[str, int]] = field(
        default_factory=lambda: {"claim": {}, "settle": {}})
    busy_cores: list[float] = field(default_factory=list)  # per run
    runnable: list[int] = field(default_factory=list)  # every sample
    worker_cpu: list[float] = field(default_factory=list)  # cores the workers used, per run
    commits_per_1000: list[float] = field(default_factory=list)
    steady: list[float] = field(default_factory=list)  # jobs/s, middle 80 %, per run
    first_ms: list[float] = field(default_factory=list)  # "go" → the first completion
    tail_ms: list[float] = field(default_factory=list)  # the 90th percentile → the last

    def steady_rate(self) -> float:
        return statistics.median(self.steady)

    def summary(self) -> str:
        parts = [_waits(name, w) for name, w in self.waits.items()]
        if self.steady:
            parts.insert(0, f"the middle 80 % of completions at {self.steady_rate():,.0f} "
                            "jobs/s (median of the runs), the first completion "
                            f"{statistics.median(self.first_ms):.0f} ms after \"go\", the "
                            f"last 10 % in {statistics.median(self.tail_ms):.0f} ms")
        if self.commits_per_1000:
            parts.append(f"{statistics.median(self.commits_per_1000):,.0f} commits per "
                         "1,000 jobs")
        if self.busy_cores:
            cores = os.cpu_count() or 1
            parts.append(
                f"host CPUs busy {statistics.median(self.busy_cores):.2f} of {cores} cores, "
                f"worker processes {statistics.median(self.worker_cpu):.2f} cores, runnable "
                f"tasks median {statistics.median(self.runnable):.0f} "
                f"(p90 {sorted(self.runnable)[int(0.9 * (len(self.runnable) - 1))]})")
        return "; ".join(parts)


def _waits(statement: str, waits: dict[str, int]) -> str:
    total = sum(waits.values())
    if not total:
        return f"no {statement} seen running"
    shares = sorted(waits.items(), key=lambda kv: -kv[1])
    return f"{statement} statement, {total:,} samples: " + ", ".join(
        f"{event} {count / total:.0%}" for event, count in shares[:5])


async def sampling(bench: Bench, prefix: str, jobs: int, into: Sampled, mode: str,
                   count: int, concurrency: int) -> float:
    """Run ``count`` worker processes while another connection samples, every 5 ms or
    so, what the backends running venturi's claim and settle statements wait on, and
    this process samples the host's CPUs: both from "go" (the children booted and
    connected) to the last one's "done". The sampler's own transactions are taken off
    the commit count."""
    conn = await asyncpg.connect(bench.dsn)
    sampler_conn = await asyncpg.connect(bench.dsn)
    done = asyncio.Event()
    taken = 0  # the sampler's queries: each a transaction of its own
    at_go: list[tuple[int, int, int]] = []
    go_wall: list[float] = []
    sampler: asyncio.Task[None] | None = None

    async def sample() -> None:
        nonlocal taken
        while not done.is_set():
            for statement, event in await sampler_conn.fetch(STATEMENT_WAITS, prefix):
                waits = into.waits[statement]
                waits[event] = waits.get(event, 0) + 1
            taken += 1
            into.runnable.append(_cpu_times()[2] - 1)  # less this process
            await asyncio.sleep(0.005)

    def go() -> None:
        nonlocal sampler
        at_go.append(_cpu_times())
        go_wall.append(time.time())
        sampler = asyncio.create_task(sample())

    commits = await conn.fetchval(COMMITS)
    cpu: list[float] = []
    try:
        seconds = await _processes(bench, mode, prefix, count, concurrency, cpu, go)
        busy_after, total_after, _ = _cpu_times()
    finally:
        done.set()
        if sampler is not None:
            await sampler
        # A backend reports its counts when it exits (the children have, the sampler
        # closes now) and at most every half second otherwise; pg_stat_database is read
        # from a snapshot taken once per transaction.
        await sampler_conn.close()
        await asyncio.sleep(0.6)
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        commits_after = await conn.fetchval(COMMITS)
        await conn.close()
    busy, total, _ = at_go[0]
    into.busy_cores.append((busy_after - busy) / max(total_after - total, 1)
                           * (os.cpu_count() or 1))
    into.worker_cpu.append(sum(cpu) / seconds)
    into.commits_per_1000.append((commits_after - commits - taken) / jobs * 1000)
    c = await asyncpg.connect(bench.dsn)
    try:
        span, first, last, p90 = await c.fetchrow(MIDDLE.format(p=prefix), KIND)
    finally:
        await c.close()
    into.steady.append(0.8 * jobs / max(float(span), 1e-6))
    into.first_ms.append((float(first) - go_wall[0]) * 1000)
    into.tail_ms.append((float(last) - float(p90)) * 1000)
    return seconds


@scenario("scaleout", "scale-out: worker processes on one table")
async def scaleout(bench: Bench) -> None:
    """N no-op jobs (100,000 at full size) drained by one worker process
    (`Worker(concurrency=50).run(until_empty=True)`, defaults), by two, and by eight at
    concurrency 25, on the same table, timed by the parent from "go" to the last one's
    return (processes started and connected beforehand); the raw batched loop in one,
    two and eight processes likewise. During the one- and eight-process worker drains
    another connection samples `pg_stat_activity` for what the backends running the claim
    and the settle statements wait on (a lock convoy would show as `Lock:` waits, a
    commit convoy as `LWLock:WALWrite` and `IO:WALSync`), the database's commits per
    1,000 jobs are counted, and the host's CPUs are sampled (`/proc/stat`: cores busy,
    runnable tasks; the worker processes' own CPU time from `/proc/PID/stat`): with more
    runnable tasks than cores, the machine, not the table, is the limit. Those two drains
    also give the rate of the middle 80 % of their completions (by `finished_at`, the
    settles' commit times): the table's throughput once every process runs, without the
    boots (eight at once on the machine's cores) and the last claims' tail that the timed
    figure includes. N is five times the other drains': a convoy is a matter of
    sustained contention, and in a drain of 20,000 jobs (about 1.2 s) eight boots on two
    cores are a sixth of the timed span (benchmarks/results-throughput.md, "Scale-out:
    the middle of the drain")."""
    n = bench.size.scaleout
    sampled = {"worker1": Sampled(), "worker8": Sampled()}
    async with bench.fresh_prefix() as sp:
        conn = await asyncpg.connect(bench.dsn)
        try:
            contenders: dict[str, tuple[str, int, str, Drain]] = {
                f"{mode}{k}": (sp, n, KIND, functools.partial(
                    _processes, bench, mode, sp, k, 25 if k == 8 else 50))
                for mode in ("raw", "worker") for k in (1, 2, 8)
            }
            for name, into in sampled.items():
                k = int(name[-1])
                contenders[name] = (sp, n, KIND, functools.partial(
                    sampling, bench, sp, n, into, "worker", k, 25 if k == 8 else 50))
            secs = await take_turns(bench, conn, contenders)
        finally:
            await conn.close()
    r1, r2, r8 = ("raw batched loop, 1 process", "raw batched loop, 2 processes",
                  "raw batched loop, 8 processes")
    one = "Worker concurrency=50, 1 process"
    steady = sampled["worker8"].steady_rate() / sampled["worker1"].steady_rate()
    bench.record(Figure(bench.scenario, r1, n, secs["raw1"], raw=True))
    bench.record(Figure(bench.scenario, r2, n, secs["raw2"], raw=True))
    bench.record(Figure(bench.scenario, r8, n, secs["raw8"], raw=True))
    bench.record(Figure(bench.scenario, one, n, secs["worker1"], (r1,),
                        note=sampled["worker1"].summary()))
    bench.record(Figure(bench.scenario, "Worker concurrency=50, 2 processes", n,
                        secs["worker2"], (r2, one), note="the ratio to 1 process is the "
                        "scale-out factor"))
    bench.record(Figure(bench.scenario, "Worker concurrency=25, 8 processes", n,
                        secs["worker8"], (r8, one),
                        note=f"the ratio to 1 process: no convoy when ≥ 100 %; the middle "
                             f"80 % of completions ran at {steady:.0%} of 1 process's; "
                             f"{sampled['worker8'].summary()}"))
