"""Worker processes on one table, looked at closely: what one shape costs per job.

``python -m benchmarks.scale_probe [--shape 8x25 --shape 1x50] [--jobs 20000 --jobs 100000]
[--rounds 3]`` drains N no-op jobs with P worker processes of C slots each (the library's
defaults but for the concurrency, as the ``scaleout`` scenario runs them: started and
connected first, timed from "go" to the last one's return), the shapes taking turns
within each round, and reports per shape and size the medians over rounds of:

- jobs/s;
- the database's commits per 1,000 jobs (``pg_stat_database``, the sampler's own taken off);
- CPU per job, in microseconds: of the worker processes (``/proc/PID/stat``) and of the
  whole host (``/proc/stat``: the workers, PostgreSQL and anything else running), both
  from "go" to the end, and how many of the host's cores were busy meanwhile;
- what the backends running the claim and the settle statements waited on
  (``pg_stat_activity`` sampled every 5 ms or so; a lock convoy shows as ``Lock:``).

With the host's cores all busy, the figure is bounded by CPU per job (host) × jobs/s ≤
cores: a shape that costs more CPU per job cannot drain faster, whatever the table does.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from dataclasses import dataclass, field

import asyncpg

from .harness import DEFAULT_DSN, SIZES, Bench, truncate
from .scenarios.scaleout import Sampled, _waits, sampling
from .scenarios.worker import fill


@dataclass
class Shape:
    processes: int
    slots: int
    seconds: list[float] = field(default_factory=list)
    sampled: Sampled = field(default_factory=Sampled)

    @property
    def name(self) -> str:
        return f"{self.processes}x{self.slots}"


async def probe(dsn: str, shapes: list[tuple[int, int]], jobs: int, rounds: int) -> list[Shape]:
    bench = Bench(dsn=dsn, size=SIZES["full"])
    results = [Shape(p, c) for p, c in shapes]
    async with bench.fresh_prefix() as prefix:
        conn = await asyncpg.connect(dsn)
        try:
            for r in range(rounds):
                for shape in results[r % len(results):] + results[:r % len(results)]:
                    await truncate(conn, prefix)
                    await fill(conn, prefix, jobs)
                    shape.seconds.append(await sampling(
                        bench, prefix, jobs, shape.sampled, "worker", shape.processes,
                        shape.slots))
                    left = await conn.fetchval(
                        f"SELECT count(*) FROM {prefix}jobs WHERE status <> 'completed'")
                    if left:
                        raise RuntimeError(f"{shape.name}: {left} jobs left after the drain")
        finally:
            await conn.close()
    return results


def report(shape: Shape, jobs: int) -> str:
    s = shape.sampled
    rates = [jobs / x for x in shape.seconds]
    worker_us = [c * x / jobs * 1e6 for c, x in zip(s.worker_cpu, shape.seconds, strict=True)]
    host_us = [c * x / jobs * 1e6 for c, x in zip(s.busy_cores, shape.seconds, strict=True)]
    return (f"{shape.name:>5} {jobs:>7,} jobs: {statistics.median(rates):>8,.0f} jobs/s "
            f"({min(rates):,.0f}-{max(rates):,.0f}); "
            f"{statistics.median(s.commits_per_1000):.0f} commits/1000 jobs; CPU per job "
            f"{statistics.median(worker_us):.0f} us in the workers "
            f"({statistics.median(worker_us) / shape.processes:.0f} per process), "
            f"{statistics.median(host_us):.0f} us on the host; "
            f"host busy {statistics.median(s.busy_cores):.2f} cores\n"
            f"      {_waits('claim', s.waits['claim'])}\n"
            f"      {_waits('settle', s.waits['settle'])}")


def _shape(text: str) -> tuple[int, int]:
    processes, slots = text.lower().split("x")
    return int(processes), int(slots)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale_probe",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", type=_shape,
                        help="PROCESSESxSLOTS (repeatable; default 8x25 and 1x50)")
    parser.add_argument("--jobs", action="append", type=int,
                        help="jobs per drain (repeatable; default 20000 and 100000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    shapes = args.shape or [(8, 25), (1, 50)]
    for jobs in args.jobs or [20_000, 100_000]:
        for shape in asyncio.run(probe(args.dsn, shapes, jobs, args.rounds)):
            print(report(shape, jobs), flush=True)


if __name__ == "__main__":
    main()
