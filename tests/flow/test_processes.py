"""Flow control across worker processes (docs/concepts/flow-control.md): four workers of
twenty slots each on one database, every run recorded in a side table."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from venturi import Queue, Status

from ..conftest import wait_for
from .conftest import FlowSide, workers_up
from .tasks import Capped, Keyed, Rated, Steady, Stuck

pytestmark = pytest.mark.slow

PROCESSES = 4


async def _fleet(pgq: Queue, spawn: Any, n: int = PROCESSES) -> list[Any]:
    procs = [spawn() for _ in range(n)]
    await wait_for(lambda: workers_up(pgq, procs), timeout=30, what="the workers to boot")
    return procs


def _most_at_once(starts: list[Any], ends: list[Any]) -> int:
    """The most runs between their start and end rows at any instant."""
    events = sorted([(r["at"], 1) for r in starts] + [(r["at"], -1) for r in ends],
                    key=lambda e: (e[0], e[1]))  # an end at the same instant goes first
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


async def test_concurrency_5_is_never_exceeded_across_processes(
        pgq: Queue, side: FlowSide, spawn: Any) -> None:
    procs = await _fleet(pgq, spawn)
    # Runs of 0.3 s: five starts land before the first end even when each start's insert
    # is late by a good part of that (2 cores, four processes, their side tables).
    await pgq.enqueue_many([Capped(seconds=0.3) for _ in range(50)])
    await wait_for(lambda: _done(side, "end", "flow.capped", 50), timeout=60,
                   what="50 capped runs")
    starts, ends = await side.rows("start", "flow.capped"), await side.rows("end", "flow.capped")
    assert _most_at_once(starts, ends) <= 5
    assert _most_at_once(starts, ends) == 5  # and the limit was used
    assert len({r["pid"] for r in starts}) > 1, "one process did all the work"
    assert all(not p.exited() for p in procs)


async def test_concurrency_1_per_key_runs_each_key_alone_and_in_order(
        pgq: Queue, side: FlowSide, spawn: Any) -> None:
    await _fleet(pgq, spawn)
    keys = [f"tenant-{i}" for i in range(6)]
    await pgq.enqueue_many([Keyed(key=k, n=n) for n in range(15) for k in keys])
    total = len(keys) * 15
    await wait_for(lambda: _done(side, "end", "flow.keyed", total), timeout=60,
                   what="every keyed run")
    starts, ends = await side.rows("start", "flow.keyed"), await side.rows("end", "flow.keyed")
    for key in keys:
        mine_starts = [r for r in starts if r["key"] == key]
        mine_ends = [r for r in ends if r["key"] == key]
        assert _most_at_once(mine_starts, mine_ends) == 1, key
        assert [r["n"] for r in mine_starts] == list(range(15)), key
    assert _most_at_once(starts, ends) > 1  # the keys did run side by side


async def test_rate_50_per_second_holds_in_every_window(
        pgq: Queue, side: FlowSide, spawn: Any) -> None:
    await _fleet(pgq, spawn)
    await pgq.enqueue_many([Rated() for _ in range(220)])
    await wait_for(lambda: _done(side, "start", "flow.rated", 220), timeout=60,
                   what="220 rated runs")
    claims = [r["at"] for r in await side.rows("claimed", "flow.rated")]
    second = dt.timedelta(seconds=1)
    for i, t in enumerate(claims):  # every window [t, t + 1 s) that starts at a claim
        assert sum(1 for u in claims[i:] if u < t + second) <= 50, t
    # The long run: about as many claims in four seconds as the rate allows. Each
    # window's claims wait for the last one's to leave it, and on a busy machine each
    # wake-up is late by a little more: three of those late by 0.3 s leave 150.
    first = claims[0]
    in_four = sum(1 for t in claims if t < first + 4 * second)
    assert 150 <= in_four <= 200, in_four


async def test_pause_stops_every_process_within_a_second_and_resume_restarts(
        pgq: Queue, side: FlowSide, spawn: Any) -> None:
    procs = await _fleet(pgq, spawn)
    await pgq.enqueue_many([Steady(seconds=0.2) for _ in range(3000)])

    async def every_process_started() -> bool:
        return {r["pid"] for r in await side.rows("start", "flow.steady")} \
            >= {p.pid for p in procs}

    await wait_for(every_process_started, timeout=30, what="every process to run jobs")
    paused_at = await pgq.store.db_now()
    await pgq.pause("flow.steady")

    async def quiet() -> bool:  # nothing started for a while
        latest = (await side.rows("start", "flow.steady"))[-1]["at"]
        return (await pgq.store.db_now()) - latest > dt.timedelta(seconds=1.5)

    await wait_for(quiet, timeout=20, what="starts to stop")
    # Claims, not starts: a job claimed just before the pause may start a moment later
    # on a busy machine, and the pause is a promise about claims.
    late = [r for r in await side.rows("claimed", "flow.steady")
            if r["at"] > paused_at + dt.timedelta(seconds=1)]
    assert late == []
    assert await side.rows("claimed", "flow.steady")  # the trigger did record them
    assert await pgq.count(kind="flow.steady", statuses=[Status.PENDING]) > 0
    assert [k.held for k in await pgq.kinds() if k.kind == "flow.steady"] == ["paused"]

    resumed_at = await pgq.store.db_now()
    await pgq.resume("flow.steady")

    async def every_process_restarted() -> bool:
        pids = {r["pid"] for r in await side.rows("start", "flow.steady") if r["at"] > resumed_at}
        return pids >= {p.pid for p in procs}

    await wait_for(every_process_restarted, timeout=10, what="every process to start again")


async def test_a_killed_workers_claims_count_until_their_leases_are_recovered(
        pgq: Queue, side: FlowSide, spawn: Any) -> None:
    (a,) = await _fleet(pgq, spawn, 1)
    jobs = await pgq.enqueue_many([Stuck() for _ in range(6)])
    await wait_for(lambda: _done(side, "start", "flow.stuck", 3), what="three stuck runs")
    assert len({r["job_id"] for r in await side.rows("start", "flow.stuck")}) == 3
    b = spawn()
    await wait_for(lambda: workers_up(pgq, [b]), timeout=30, what="worker b to boot")
    # Counted from the kill: what a did before it (a renewal that slipped while b booted,
    # its own reaper taking the claim back, a rerun) is not b's doing.
    killed_at = await pgq.store.db_now()
    a.kill9()

    async def b_starts() -> list[Any]:
        return [r for r in await side.rows("start", "flow.stuck") if r["pid"] == b.pid]

    async def b_took_three() -> bool:
        return len(await b_starts()) >= 3
    await wait_for(b_took_three, timeout=30, what="worker b to take over three runs")
    took = await b_starts()
    assert len(took) == 3
    recovered = []
    for job_id in jobs:
        recovered += [e.recorded_at for e in await pgq.journal(job_id)
                      if e.note == "lease-expired" and e.recorded_at > killed_at]
    assert len(recovered) == 3  # the three claims a held when it died
    # b claimed nothing of the kind while a's three claims counted.
    assert min(r["at"] for r in took) >= min(recovered)
    b.kill9()


async def _done(side: FlowSide, event: str, kind: str, n: int) -> bool:
    return await side.count(event, kind) >= n
