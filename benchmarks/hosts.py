"""Faults beyond one host (docs/operations/high-availability.md): three worker hosts, a
producer host and a database host as network namespaces (tests/hosts/), thousands of
jobs, and one fault per scenario:

- ``partition``: a worker host's link to the switch goes down mid-run, and comes back
  (the producer goes on until that host has run jobs again);
- ``lossy``: one worker host reaches the database through a proxy that adds 200 ms each
  way, stalls and resets connections;
- ``failover``: the primary (synchronous standby built with pg_basebackup) is stopped
  and the standby promoted (the producer goes on until every host has run a job on it);
  workers and producer use a multi-host DSN with ``target_session_attrs=read-write``;
- ``failover-host-lost``: the same, but the primary's host goes silent instead;
- ``failover-async``: asynchronous replication, the standby behind when the primary
  dies: a demonstration of what is lost (its losses do not fail the run).

    python -m benchmarks.hosts partition --size small   # what CI runs (pytest -m faults)
    python -m benchmarks.hosts all --size full           # writes benchmarks/results-hosts.md

Needs root, iproute2 and the PostgreSQL server binaries (tests/faults_cluster.py).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.hosts.fleet import Run, starts_per_job
from tests.hosts.tasks import WORK_LEASE
from tests.hosts.testbed import Result, Testbed, unavailable_reason

HERE = Path(__file__).resolve().parent
WORKERS = ("w1", "w2", "w3")
PROXY_DELAY = 0.2  # seconds added to each direction
STANDBY_LAG = 2.0  # seconds the standby is cut off before the primary fails


@dataclass(frozen=True)
class Size:
    jobs: int
    window: float  # seconds over which the jobs are produced
    cut: float = 20.0  # how long the partition lasts: past the store's SILENT_PEER bound
    cut_window: float = 36.0  # the partition run's production window (then on till w1 rejoins)
    slow_every: int = 20  # every n-th job outlasts a lease
    concurrency: int = 8
    timeout: float = 120.0


SIZES = {
    "small": Size(jobs=1_500, window=12.0),
    "full": Size(jobs=20_000, window=150.0, cut=30.0, cut_window=150.0, timeout=300.0),
}


def _dsn(*hostports: str, extra: str = "") -> str:
    query = "?target_session_attrs=read-write" if len(hostports) > 1 else ""
    if extra:
        query += ("&" if query else "?") + extra
    return f"postgresql://root@{','.join(hostports)}/postgres{query}"


async def _setup(bed: Testbed, size: Size, dsn_of: dict[str, str],
                 extra: list[str] | None = None) -> None:
    for host in WORKERS:
        bed.start_worker(host, dsn_of[host], concurrency=size.concurrency, extra=extra)
    await bed.wait(bed.workers_registered, 60, "every worker to register")


def _starts(runs: list[Run], host: str, after: float = 0.0) -> list[Run]:
    return [r for r in runs if r.event == "start" and r.host == host and r.at > after]


async def partition(size: Size, logdir: Path) -> Result:
    """Cut w1 off mid-run; its claims are recovered elsewhere; it heals and rejoins."""
    bed = Testbed(["db", "app", *WORKERS], logdir)
    try:
        bed.open_network()
        db = bed.database("db")
        db.start()
        await bed.use_primary(db)
        await bed.migrate()
        dsn = _dsn(db.hostport)
        await _setup(bed, size, dict.fromkeys(WORKERS, dsn))
        # The producer goes on past its jobs until w1 has run jobs again after the heal:
        # however long the rejoin takes, there is work left for it to take.
        rejoined = logdir / "w1-rejoined"
        bed.start_producer("app", dsn, size.jobs, size.cut_window, size.slow_every,
                           until=rejoined)
        victim = "w1"

        # Cut while a slow run started on w1 less than a second ago: it cannot finish
        # before its local deadline (a lease is shorter than a slow run), so the cut is
        # seen to cancel a handler, not only to orphan quick ones.
        def slow_run_fresh() -> bool:
            now = time.monotonic()
            runs = bed.runs()
            ended = {(r.job_id, r.run_no) for r in runs if r.event == "end"}
            return any(r.slow and now - r.at < 1.0 and (r.job_id, r.run_no) not in ended
                       for r in _starts(runs, victim))
        await asyncio.sleep(size.cut_window * 0.2)
        await bed.wait(slow_run_fresh, 30, "a slow run to start on w1", interval=0.02)
        bed.net.cut(victim)
        cut_at = time.monotonic()
        held = await bed.driver.fetch(  # type: ignore[union-attr]
            f"SELECT id, run_count FROM {bed.prefix}jobs"
            " WHERE status = 'claimed' AND claimed_by LIKE $1", f"{victim}/%")
        in_flight = {r["id"]: r["run_count"] for r in held}

        async def recovered() -> bool:
            rows = await bed.driver.fetch(  # type: ignore[union-attr]
                f"SELECT id FROM {bed.prefix}jobs WHERE id = ANY($1::uuid[])"
                " AND status = 'claimed' AND claimed_by LIKE $2", list(in_flight),
                f"{victim}/%")
            return not rows
        recovery = await bed.wait(recovered, size.cut + 60, "w1's claims to be recovered")
        await asyncio.sleep(max(0.0, cut_at + size.cut - time.monotonic()))
        bed.net.heal(victim)
        healed_at = time.monotonic()
        rejoin = await bed.wait(lambda: _starts(bed.runs(), victim, healed_at), 120,
                                "w1 to run jobs again after the heal")
        rejoined.touch()
        result = await bed.finish(None, size.timeout)
        w1 = bed.workers[victim]
        lost_runs = {(e["job_id"], e["run_no"]) for e in w1.events("lease_lost")}
        # Every run beyond a job's first is explained: w1 held the job at the cut, or a
        # worker logged lease_lost for it (a renewal late on a busy machine, anywhere).
        lost_any: Counter[str] = Counter(
            str(e["job_id"]) for proc in bed.workers.values() for e in proc.events("lease_lost"))
        held_at_cut = {str(j) for j in in_flight}
        unexplained = sum(
            max(0, n - 1 - lost_any[str(j)] - (str(j) in held_at_cut))
            for j, n in starts_per_job(bed.runs()).items())
        ended = {(str(r.job_id), r.run_no) for r in bed.runs() if r.event == "end"}
        cancelled = {k for k in lost_runs if k not in ended}
        stale_settled = await bed.q(
            f"SELECT count(*) FROM {bed.prefix}journal e"
            " JOIN unnest($1::uuid[], $2::int[]) AS l(id, run_no)"
            " ON e.job_id = l.id AND e.run_no = l.run_no WHERE e.outcome <> 'stale-recovered'",
            [k[0] for k in lost_runs], [k[1] for k in lost_runs])
        result.figures.update({
            "partitions": f"1 ({victim}, {size.cut:.0f} s; lease {WORK_LEASE.total_seconds():g} s)",
            "in flight on w1 at the cut": len(in_flight),
            "w1 lease_lost (cancelled)": f"{len(lost_runs)} ({len(cancelled)} handlers"
                                         " stopped before their end)",
            "w1 runs lost but settled": stale_settled,
            "w1 settle_refused": w1.count("settle_refused"),
            "cut -> w1 claims recovered": f"{recovery:.1f} s",
            "heal -> w1 runs jobs again": f"{rejoin:.1f} s",
            "runs per host": {h: len(_starts(bed.runs(), h)) for h in WORKERS},
            "re-runs with no cut or lease_lost behind them": unexplained,
        })
        result.checks.update(in_flight=len(in_flight), cancelled=len(cancelled),
                             stale_settled=stale_settled, lease_lost=len(lost_runs),
                             unexplained_reruns=unexplained,
                             lease_lost_elsewhere=sum(bed.workers[h].count("lease_lost")
                                                      for h in WORKERS if h != victim))
        return result
    finally:
        await bed.close()


async def lossy(size: Size, logdir: Path) -> Result:
    """w3 reaches the database through tests/hosts/proxy.py: 200 ms each way, stalls,
    resets. Throughput degrades there; the promises hold everywhere."""
    bed = Testbed(["db", "app", *WORKERS], logdir)
    try:
        bed.open_network()
        db = bed.database("db")
        db.start()
        await bed.use_primary(db)
        await bed.migrate()
        dsn = _dsn(db.hostport)
        proxy = bed.spawn("w3", [sys.executable, "-m", "tests.hosts.proxy",
                                 "--listen", "127.0.0.1:6432", "--upstream", db.hostport,
                                 "--delay", str(PROXY_DELAY), "--stall-rate", "0.05",
                                 "--reset-rate", "0.03", "--storm-every", "4", "--seed", "7",
                                 "--arm-on-signal",
                                 "--max-seconds", str(size.window + size.timeout + 120)],
                          "proxy")
        await bed.wait(lambda: "proxy_listening" in proxy.output(), 30, "the proxy")
        await _setup(bed, size, {"w1": dsn, "w2": dsn,
                                 "w3": "postgresql://root@127.0.0.1:6432/postgres"})
        proxy.popen.send_signal(signal.SIGUSR1)  # the faults begin once w3 has booted
        bed.start_producer("app", dsn, size.jobs, size.window, size.slow_every)
        result = await bed.finish(size.jobs, size.timeout)
        proxy.terminate()
        await asyncio.to_thread(proxy.wait, 30)
        stats = next(iter(proxy.events("proxy_stopped")), {})
        runs = bed.runs()
        w3 = bed.workers["w3"]
        ends = {h: sum(1 for r in runs if r.event == "end" and r.host == h) for h in WORKERS}
        result.figures.update({
            "slow link": f"w3 via proxy: +{PROXY_DELAY * 1000:.0f} ms each way, stalls and"
                         " resets at random",
            "proxy": {k: stats.get(k) for k in ("connections", "stalls", "resets")},
            "runs finished per host": ends,
            "w3 outages/lost/refused":
                f"{w3.count('db_unavailable')} / {w3.count('lease_lost')}"
                f" / {w3.count('settle_refused')}",
        })
        result.checks.update(ends=ends, resets=stats.get("resets", 0),
                             stalls=stats.get("stalls", 0))
        return result
    finally:
        await bed.close()


async def failover(size: Size, logdir: Path, *, synchronous: bool = True,
                   lose_host: bool = False) -> Result:
    """Cut the standby off for a moment, stop the primary mid-run and promote the standby.
    Synchronous: no acknowledged enqueue or settlement is lost, and nobody restarts.
    Asynchronous (``failover-async``): what the primary acknowledged while the standby was
    cut off is gone, and the checks count it. ``lose_host`` (``failover-host-lost``): the
    primary's host vanishes instead (its link goes silent: packets to it are dropped, no
    refusal comes back), as when a machine or its network dies."""
    bed = Testbed(["db1", "db2", "app", *WORKERS], logdir)
    try:
        bed.open_network()
        primary = bed.database("db1", synchronous=True)
        primary.start()
        standby = bed.database("db2", standby_of=primary)
        standby.start()
        await bed.use_primary(primary)
        if synchronous:
            await bed.require_standby()
        await bed.migrate()
        dsn = _dsn(primary.hostport, standby.hostport)
        await _setup(bed, size, dict.fromkeys(WORKERS, dsn), extra=["--log-level", "debug"])
        # The producer goes on past its jobs until every host has run one on the new
        # primary: a host that rejoins late (a silent peer's timeout) still finds work.
        everyone_back = logdir / "all-rejoined"
        bed.start_producer("app", dsn, size.jobs, size.window, size.slow_every,
                           until=everyone_back)
        await asyncio.sleep(size.window * 0.4)
        # The standby falls behind (its link down) just before the primary dies: with
        # synchronous replication no commit is acknowledged meanwhile; without, the
        # primary goes on acknowledging what the standby will never have.
        if lose_host:
            bed.net.vanish("db1")
            stopped_at = time.monotonic()
        else:
            bed.net.cut("db2")
            await asyncio.sleep(STANDBY_LAG)
            await asyncio.to_thread(primary.stop, "immediate")
            stopped_at = time.monotonic()
            bed.net.heal("db2")
        await asyncio.to_thread(standby.promote)
        promoted_at = time.monotonic()
        await bed.use_primary(standby)
        before = await bed.completed()

        async def progress() -> bool:
            return await bed.completed() > before
        first = await bed.wait(progress, 120, "a completion on the new primary")
        rejoined = {}
        for host in WORKERS:
            rejoined[host] = await bed.wait(lambda h=host: _starts(bed.runs(), h, promoted_at),
                                            120, f"{host} to run jobs on the new primary")
        everyone_back.touch()
        result = await bed.finish(None, size.timeout)
        acked = await bed.acknowledged_settlements_lost()
        mode = "synchronous" if synchronous else "asynchronous"
        how = ("the primary's host went silent" if lose_host else
               f"standby cut off {STANDBY_LAG:g} s, then the primary stopped -m immediate")
        result.figures.update({
            "failovers": f"1 ({mode}; {how}; the standby promoted)",
            "acknowledged settlements": acked["acknowledged"],
            "acknowledged settlements lost": acked["lost"],
            "  of which now stale-recovered": acked["stale_recovered"],
            "stop -> promoted": f"{promoted_at - stopped_at:.1f} s",
            "stop -> first completion": f"{promoted_at - stopped_at + first:.1f} s",
            "promoted -> every host running": f"{max(rejoined.values()):.1f} s",
            "worker restarts": 0,
        })
        result.checks.update(acked_lost=acked["lost"], acknowledged=acked["acknowledged"])
        return result
    finally:
        await bed.close()


async def failover_async(size: Size, logdir: Path) -> Result:
    return await failover(size, logdir, synchronous=False)


async def failover_host_lost(size: Size, logdir: Path) -> Result:
    return await failover(size, logdir, lose_host=True)


SCENARIOS = {"partition": partition, "lossy": lossy, "failover": failover,
             "failover-host-lost": failover_host_lost, "failover-async": failover_async}
EXPECTED_TO_LOSE = {"failover-async"}  # the demonstration of what asynchronous replication loses


def render(name: str, size_name: str, result: Result, command: str) -> str:
    return (f"## {name} ({size_name})\n\nCommand: `{command}`\n\n```\n"
            + "\n".join(result.lines()) + "\n```\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.hosts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=[*SCENARIOS, "all"])
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--out", type=Path, help="default: benchmarks/results-hosts.md for full")
    args = p.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"cannot make the test hosts: {reason}", file=sys.stderr)
        return 2
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    command = shlex.join(["python", "-m", "benchmarks.hosts", *argv])
    texts, ok = [], True
    for name in names:
        logdir = Path(tempfile.mkdtemp(prefix=f"venturi-hosts-{name}-"))
        result = asyncio.run(SCENARIOS[name](SIZES[args.size], logdir))
        text = render(name, args.size, result, command)
        print(text, flush=True)
        print(f"logs: {logdir}", flush=True)
        texts.append(text)
        ok = ok and (result.ok or name in EXPECTED_TO_LOSE)
    out = args.out or (HERE / "results-hosts.md" if args.size == "full" else None)
    if out is not None:
        out.write_text("\n".join(texts))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
