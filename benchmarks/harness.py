"""The scenario registry, the sizes, and the measuring helpers every scenario shares.

A scenario is an async function ``(Bench) -> None`` registered with
:func:`scenario`; it records :class:`Figure` objects on the ``Bench``, each
either a raw reference or a venturi figure naming the references it is
compared with. Add a scenario (worker drain, pickup latency, backlog, memory)
by writing one such function in a module imported by :mod:`benchmarks.scenarios`.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from venturi.store.postgres import PostgresStore

DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/test"


@dataclass(frozen=True)
class Size:
    """How big one run is. ``quick`` keeps CI in seconds; ``full`` is run by hand."""

    name: str
    runs: int  # measured runs per figure; the median is reported
    one_by_one: int  # jobs per run of the one-by-one scenarios
    batch: int  # jobs per enqueue_many call
    batches: int  # calls per run
    big_batch: int | None  # one extra batch size measured at full size only
    drain: int = 2_000  # jobs per drain run (worker scenarios)
    scaleout: int = 2_000  # jobs per drain run of the scale-out scenario
    one_row: int = 200  # jobs per run of the one-row-at-a-time raw drain
    pickup: int = 100  # latency samples per contender
    finished: int = 20_000  # backlog: completed rows already in the table
    future: int = 2_000  # backlog: rows scheduled in the future
    memory: int = 5_000  # jobs the memory scenario's worker runs through
    rss_every: float = 0.2  # seconds between VmRSS samples


SIZES = {
    "quick": Size("quick", runs=1, one_by_one=200, batch=1_000, batches=2, big_batch=None),
    "full": Size("full", runs=3, one_by_one=5_000, batch=1_000, batches=20, big_batch=50_000,
                 drain=20_000, scaleout=100_000, one_row=5_000, pickup=1_000,
                 finished=1_000_000, future=100_000, memory=200_000, rss_every=0.25),
}


@dataclass
class Figure:
    """One measured rate; ``references`` name the figures it is compared with (raw
    figures, or another venturi figure of the same scenario, e.g. empty vs backlog).

    ``unit`` says what the figure is: ``jobs/s`` (``seconds`` per run), ``ms``
    (``samples`` are latencies; compared by p50 and p99, lower is better) or
    ``MB`` (``samples`` are the RSS of a process over time).
    """

    scenario: str
    name: str
    jobs: int
    seconds: list[float]
    references: tuple[str, ...] = ()  # raw figures of the same scenario to compare with
    raw: bool = False
    note: str = ""
    unit: str = "jobs/s"
    samples: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile of ``samples`` (nearest rank)."""
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]

    @property
    def rates(self) -> list[float]:
        return [self.jobs / s for s in self.seconds]

    @property
    def rate(self) -> float:
        """Jobs per second: the median over runs (a run's rate, not a mean of times)."""
        return statistics.median(self.rates)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "scenario": self.scenario, "name": self.name, "jobs": self.jobs,
            "seconds": self.seconds, "rates": self.rates, "jobs_per_s": self.rate,
            "references": list(self.references), "raw": self.raw, "note": self.note,
            "unit": self.unit,
        }
        if self.unit == "ms":
            out.update(p50_ms=self.percentile(50), p99_ms=self.percentile(99),
                       max_ms=max(self.samples), samples=self.samples)
        elif self.unit == "MB":
            out.update(rss_mb=rss_summary(self.samples), samples=self.samples)
        return out

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Figure:
        """The figure a results file's row was written from (``as_dict`` read back)."""
        return cls(scenario=row["scenario"], name=row["name"], jobs=row["jobs"],
                   seconds=list(row["seconds"]), references=tuple(row["references"]),
                   raw=row["raw"], note=row["note"], unit=row["unit"],
                   samples=list(row.get("samples", [])))


def rss_summary(samples: list[float]) -> dict[str, float]:
    """Start (the first sample), warm (the sample a tenth of the way in: after the
    first batches have sized the buffers), peak, end, and the end's drift from warm."""
    warm = samples[len(samples) // 10]
    return {"start": samples[0], "warm": warm, "peak": max(samples), "end": samples[-1],
            "drift": samples[-1] / warm - 1}


@dataclass
class Bench:
    """What a scenario gets: the DSN, the size, and where to record figures."""

    dsn: str
    size: Size
    scenario: str = ""
    figures: list[Figure] = field(default_factory=list)

    def record(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def fresh_prefix(self) -> contextlib.AbstractAsyncContextManager[str]:
        return fresh_prefix(self.dsn)


ScenarioFn = Callable[[Bench], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    description: str
    fn: ScenarioFn


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, title: str) -> Callable[[ScenarioFn], ScenarioFn]:
    """Register ``fn`` as scenario ``name``; its docstring is the results file's description."""

    def register(fn: ScenarioFn) -> ScenarioFn:
        if name in SCENARIOS:
            raise ValueError(f"scenario {name!r} is registered twice")
        SCENARIOS[name] = Scenario(name, title, " ".join((fn.__doc__ or "").split()), fn)
        return fn

    return register


@contextlib.asynccontextmanager
async def fresh_prefix(dsn: str) -> AsyncIterator[str]:
    """A migrated throwaway prefix, dropped afterwards whatever happens."""
    prefix = f"bench{secrets.token_hex(4)}_"
    try:
        store = await PostgresStore.connect(dsn, prefix=prefix, max_size=2)
        try:
            await store.migrate()
        finally:
            await store.close()
        yield prefix
    finally:
        await drop_prefix(dsn, prefix)


def drop_statements(prefix: str, *extra_tables: str) -> list[str]:
    """What removes a prefix's queue: its tables (and ``extra_tables``) and functions."""
    tables = (*extra_tables, "journal", "jobs", "workers", "migrations", "tallies", "kinds",
              "kind_starts", "dependencies", "dependency_shards", "workflows")
    return [*(f"DROP TABLE IF EXISTS {prefix}{t} CASCADE" for t in tables),
            *(f"DROP FUNCTION IF EXISTS {prefix}{f}()" for f in (
                "tally_jobs", "follow_dependencies", "dependencies_follow_jobs"))]


DROP_LOCK_TIMEOUT = "20s"

# The sessions holding a lock on one of the prefix's tables: what a DROP that timed out
# waiting for its lock names (a session left in a transaction is a bug worth seeing).
_LOCK_HOLDERS = """
SELECT DISTINCT a.pid, a.state, a.application_name, l.relation::regclass::text AS rel,
       l.mode, round(extract(epoch FROM now() - a.xact_start)::numeric, 1) AS xact_s,
       left(a.query, 200) AS query
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.granted AND l.pid <> pg_backend_pid() AND l.relation IS NOT NULL
  AND l.relation::regclass::text LIKE $1 || '%'
"""


async def drop_prefix(dsn: str, prefix: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"SET lock_timeout = '{DROP_LOCK_TIMEOUT}'")
        for statement in drop_statements(prefix):
            try:
                await conn.execute(statement)
            except asyncpg.LockNotAvailableError:
                holders = await conn.fetch(_LOCK_HOLDERS, prefix)
                raise AssertionError(
                    f"{statement!r} waited {DROP_LOCK_TIMEOUT} for its lock; held by "
                    + "; ".join(str(dict(h)) for h in holders)) from None
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def bulk_load(conn: asyncpg.Connection, prefix: str) -> AsyncIterator[None]:
    """A transaction for loading a large fixture into ``{prefix}jobs``: the tally's
    per-row trigger on INSERT (sql/0006_tallies.sql) is off meanwhile, and the tally is
    then counted again from the table, as that migration counts it. Row by row, the
    trigger made a load of 1,000,000 finished rows take over 20 minutes. ALTER TABLE
    locks the jobs table until the transaction ends: a fixture's own prefix only."""
    trigger = f"{prefix}jobs_tally_insert"
    async with conn.transaction():
        await conn.execute(f"ALTER TABLE {prefix}jobs DISABLE TRIGGER {trigger}")
        yield
        await conn.execute(f"ALTER TABLE {prefix}jobs ENABLE TRIGGER {trigger}")
        await conn.execute(f"DELETE FROM {prefix}tallies")
        await conn.execute(f"""
            INSERT INTO {prefix}tallies (kind, status, slot, n, entered)
            SELECT kind, status, 0, count(*), 0 FROM {prefix}jobs
            WHERE status IN ('completed', 'dead') GROUP BY kind, status""")


async def timed(fn: Callable[..., Awaitable[Any]], *args: Any) -> float:
    """Wall-clock seconds of one awaited call (perf_counter: monotonic, high resolution)."""
    start = time.perf_counter()
    await fn(*args)
    return time.perf_counter() - start


async def truncate(conn: asyncpg.Connection, *prefixes: str) -> None:
    """Empty the jobs tables between runs, so every run starts from the same table size."""
    tables = ", ".join(f"{p}jobs" for p in prefixes)
    await conn.execute(f"TRUNCATE {tables} CASCADE")


Contender = Callable[[int, int], Awaitable[Any]]


async def measure(
    bench: Bench,
    conn: asyncpg.Connection,
    prefixes: tuple[str, ...],
    jobs: int,
    contenders: dict[str, Contender],
    *,
    step: int,
    warmup: int = 100,
) -> dict[str, list[float]]:
    """Time each contender on jobs ``[0, jobs)``, ``bench.size.runs`` times.

    A contender is called as ``fn(lo, hi)`` to insert jobs ``lo..hi-1``. All
    are warmed up first (prepared statements, caches). Every run starts from
    empty tables, and the contenders take turns by slices of ``step`` jobs in
    an order that rotates: on a shared machine, a burst of load from another
    process then falls on all of them alike instead of on whoever ran then.
    """
    for fn in contenders.values():
        await fn(0, min(warmup, jobs))
    names = list(contenders)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    for _run in range(bench.size.runs):
        await truncate(conn, *prefixes)
        spent = dict.fromkeys(names, 0.0)
        for lo in range(0, jobs, step):
            hi = min(lo + step, jobs)
            turn += 1
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                spent[name] += await timed(contenders[name], lo, hi)
        for name in names:
            seconds[name].append(spent[name])
    await truncate(conn, *prefixes)
    return seconds


def watch_store_calls(store: Any, began: Callable[[str], None],
                      ended: Callable[[str], None] | None = None) -> None:
    """Call ``began(name)`` as each of the store's public coroutine methods is called,
    and ``ended(name)`` as it returns or raises (the store still runs them all): the
    diagnostics' counts and timelines (benchmarks/trickle.py, benchmarks/boottrace.py)."""
    for name in dir(type(store)):
        method = getattr(store, name, None)
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            continue

        def watched(method: Callable[..., Awaitable[Any]], name: str) -> Any:
            async def call(*args: Any, **kwargs: Any) -> Any:
                began(name)
                try:
                    return await method(*args, **kwargs)
                finally:
                    if ended is not None:
                        ended(name)
            return call

        setattr(store, name, watched(method, name))
