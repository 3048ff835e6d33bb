"""Workers whose wall clocks are three hours off, one ahead and one behind (libfaketime),
on hosts of their own: delayed jobs, retry backoff, leases, timeouts, ``every=`` and
``cron=`` ticks all happen on time in database time, because database time is the only
clock a decision may use (docs/operations/high-availability.md).

Each skewed worker alone runs its own kinds, and its fallback poll is an hour, so only
its own timers can pick scheduled work up: a worker that woke on its wall clock would be
three hours early or late, and a successor tick computed from it three hours off. The
libfaketime preload fakes the wall clock only (FAKETIME_DONT_FAKE_MONOTONIC): the event
loop's clock measures elapsed time, as a host's does whatever its wall clock says.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import venturi
from venturi import Outcome

from ..ci import unavailable
from . import tasks
from .fleet import FAKETIME_LIB, skew_worker
from .testbed import Testbed

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240),
              pytest.mark.usefixtures("hosts_available")]

SKEW = {"ahead": "+3h", "behind": "-3h"}
LATE = dt.timedelta(seconds=5)  # what "on time" allows; a wall-clock mistake is 3 h
TICKS = 4  # periodic occurrences to see per kind


@pytest.fixture
async def skewed(tmp_path: Path) -> AsyncIterator[tuple[Testbed, dt.datetime]]:
    if not FAKETIME_LIB.exists():
        unavailable(f"libfaketime is not installed ({FAKETIME_LIB}; apt-get install libfaketime)")
    bed = Testbed(["db", *SKEW], tmp_path)
    try:
        bed.open_network()
        db = bed.database("db")
        db.start()
        await bed.use_primary(db)
        await bed.migrate()
        side = f"{bed.prefix}side"
        await bed.q(tasks.side_ddl(side))
        dsn = f"postgresql://root@{db.hostport}/postgres"
        began = await bed.q("SELECT now()")
        for host, offset in SKEW.items():
            proc = skew_worker(bed.net, host, dsn, bed.prefix, tmp_path, name=host,
                               kinds=tasks.skew_kinds(host), faketime=offset,
                               env={tasks.SIDE_DSN: dsn, tasks.SIDE_TABLE: side})
            bed.procs.append(proc)
            bed.workers[host] = proc
        await bed.wait(bed.workers_registered, 60, "both skewed workers to register")
        yield bed, began
    finally:
        await bed.close()


async def side_rows(bed: Testbed, kind: str) -> list[Any]:
    return list(await bed.driver.fetch(  # type: ignore[union-attr]
        f"SELECT job_id, run_no, event, at FROM {bed.prefix}side WHERE kind = $1"
        " ORDER BY seq", kind))


def start_of(rows: list[Any], job_id: Any, run_no: int) -> dt.datetime:
    (at,) = [r["at"] for r in rows if r["job_id"] == job_id and r["run_no"] == run_no
             and r["event"] == "start"]
    result: dt.datetime = at
    return result


async def test_skewed_wall_clocks_change_no_decision(
        skewed: tuple[Testbed, dt.datetime]) -> None:
    bed, began = skewed
    # The clocks really are off: each worker's own log timestamps are three hours away.
    for host, sign in (("ahead", 1), ("behind", -1)):
        (started,) = bed.workers[host].events("worker_started")
        stamp = dt.datetime.fromisoformat(str(started["timestamp"]).replace("Z", "+00:00"))
        off = (stamp - dt.datetime.now(dt.UTC)).total_seconds() * sign
        assert 2.9 * 3600 < off < 3.1 * 3600, (host, stamp)

    # What the workers table says they started at is database time, not theirs.
    workers = await bed.driver.fetch(  # type: ignore[union-attr]
        f"SELECT name, started_at, now() AS now FROM {bed.prefix}workers")
    for w in workers:
        assert began - LATE <= w["started_at"] <= w["now"], dict(w)

    async with venturi.Queue.connect(bed.primary.local_dsn,  # type: ignore[union-attr]
                                     prefix=bed.prefix, max_size=2) as queue:
        jobs: dict[str, dict[str, Any]] = {}
        for host in SKEW:
            Delayed, Flaky, Leased, Timed, _, _ = tasks.SKEW_TASKS[host]
            jobs[host] = {
                "delayed": [(await queue.enqueue(Delayed(), delay=dt.timedelta(seconds=s))).id
                            for s in (2, 4)],
                "flaky": (await queue.enqueue(Flaky())).id,
                "leased": (await queue.enqueue(Leased())).id,
                "timed": (await queue.enqueue(Timed())).id,
            }

        # While the leased runs last (several leases), their claims expire one lease
        # from database now at most, and never lie in its past: renewals are on its time.
        expiries: list[float] = []

        async def everything_done() -> bool:
            for r in await bed.driver.fetch(  # type: ignore[union-attr]
                    f"SELECT extract(epoch FROM claim_expires_at - now())::float8 AS left"
                    f" FROM {bed.prefix}jobs WHERE status = 'claimed' AND kind LIKE '%.leased'"):
                expiries.append(r["left"])
            for host in SKEW:
                ids = [*jobs[host]["delayed"], jobs[host]["flaky"], jobs[host]["leased"],
                       jobs[host]["timed"]]
                for job_id in ids:
                    row = await queue.job(job_id)
                    if row is None or row.status is not venturi.Status.COMPLETED:
                        return False
                for what in ("tick", "cron"):
                    done = await bed.q(
                        f"SELECT count(*) FROM {bed.prefix}jobs WHERE kind = $1"
                        " AND status = 'completed'", f"skew.{host}.{what}")
                    if done < TICKS:
                        return False
            return True
        await bed.wait(everything_done, 120, "every skewed job and tick to run on time",
                       interval=0.2)
        assert expiries, "no leased run was seen claimed"
        lease = tasks.SKEW_LEASE.total_seconds()
        assert all(0 < left <= lease + 0.1 for left in expiries), sorted(expiries)

        for host in SKEW:
            await _check_host(bed, queue, host, jobs[host])


async def _check_host(bed: Testbed, queue: venturi.Queue, host: str,
                      jobs: dict[str, Any]) -> None:
    where = f"on the worker {SKEW[host]} off"
    rows = await side_rows(bed, f"skew.{host}.delayed")
    for job_id in jobs["delayed"]:
        row = await queue.job(job_id)
        assert row is not None
        late = start_of(rows, job_id, 1) - row.visible_at
        assert dt.timedelta(0) <= late < LATE, f"delayed job started {late} late {where}"

    rows = await side_rows(bed, f"skew.{host}.flaky")
    gap = start_of(rows, jobs["flaky"], 2) - start_of(rows, jobs["flaky"], 1)
    assert tasks.SKEW_BACKOFF <= gap < tasks.SKEW_BACKOFF + LATE, f"retry after {gap} {where}"

    assert [e.outcome for e in await queue.journal(jobs["leased"])] == [Outcome.COMPLETED]

    rows = await side_rows(bed, f"skew.{host}.timed")
    journal = await queue.journal(jobs["timed"])
    assert [(e.outcome, e.note) for e in journal][:1] == [(Outcome.RETRIED, "timeout")]
    # From the start's record (a round trip into the run) to the settle that failed it.
    ran = journal[0].recorded_at - start_of(rows, jobs["timed"], 1)
    early = dt.timedelta(seconds=0.5)
    assert tasks.SKEW_TIMEOUT - early <= ran < tasks.SKEW_TIMEOUT + LATE, (
        f"timed out after {ran} {where}")

    for what, period in (("tick", tasks.SKEW_EVERY), ("cron", dt.timedelta(seconds=3))):
        kind = f"skew.{host}.{what}"
        rows = await side_rows(bed, kind)
        occurrences = await bed.driver.fetch(  # type: ignore[union-attr]
            f"SELECT id, visible_at FROM {bed.prefix}jobs WHERE kind = $1"
            " AND status = 'completed' ORDER BY visible_at", kind)
        ticks = [r["visible_at"] for r in occurrences]
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        # The successor of every occurrence is the next tick after database now: on the
        # period's grid, one period on (or a whole number of them, if one was missed).
        for previous, tick in itertools.pairwise(ticks):
            assert (tick - epoch) % period == dt.timedelta(0), f"{kind} tick {tick} {where}"
            gap = tick - previous
            assert gap % period == dt.timedelta(0) and period <= gap <= 3 * period, (
                f"{kind}: {previous} -> {tick} {where}")
        for r in occurrences[1:]:
            late = start_of(rows, r["id"], 1) - r["visible_at"]
            assert dt.timedelta(0) <= late < LATE, f"{kind} ran {late} late {where}"
