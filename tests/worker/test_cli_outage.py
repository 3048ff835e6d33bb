"""A 30 s database outage under the real ``venturi worker --http`` process (private
cluster): the process stays up and logs ``db_unavailable``, ``/readyz`` says 503 while
the database is gone and 200 after, jobs that finished during the outage are settled
once it is back, and the recovery time (database back to ready, and to the first new
job picked up) is measured and printed."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from pathlib import Path
from uuid import UUID

import pytest

from benchmarks.workers import WorkerProc
from tests.chaos.tasks import Slow
from venturi import Outcome, Queue, Status

from ..conftest import drop_prefix, new_prefix, wait_for
from ..faults_cluster import PrivateCluster, free_port, private_pg  # noqa: F401

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]
OUTAGE = 30.0


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0  # not listening (yet)


async def status(port: int, path: str = "/readyz") -> int:
    return await asyncio.to_thread(probe, port, path)


def marked(marks: Path, suffix: str) -> set[str]:
    return {p.name.split(".")[0] for p in marks.glob(f"*{suffix}")}


async def test_cli_worker_rides_out_a_30s_outage(private_pg: PrivateCluster,  # noqa: F811
                                                 tmp_path: Path) -> None:
    prefix = new_prefix()
    marks = tmp_path / "marks"
    marks.mkdir()
    async with Queue.connect(private_pg.dsn, prefix=prefix, max_size=2) as queue:
        await queue.migrate()
    port = free_port()
    w = WorkerProc(private_pg.dsn, prefix, tmp_path / "logs", name="outage", concurrency=4,
                   grace="5s", extra=["--http", f"127.0.0.1:{port}"])
    try:
        await wait_for(lambda: _ready(port, w), timeout=30, what="/readyz 200 at boot")
        async with Queue.connect(private_pg.dsn, prefix=prefix, max_size=2) as queue:
            inflight = [(await queue.enqueue(Slow(seconds=3, marks=str(marks)))).id
                        for _ in range(3)]
        await wait_for(lambda: len(marked(marks, ".start")) == 3, what="three jobs running")

        await asyncio.to_thread(private_pg.stop)
        stopped = time.monotonic()
        await wait_for(lambda: _code(port, 503), timeout=15, what="/readyz 503")
        not_ready_after = time.monotonic() - stopped
        await wait_for(lambda: len(marked(marks, ".end")) == 3, what="the runs to end")
        while time.monotonic() - stopped < OUTAGE:
            assert w.alive(), w.errors()
            assert await status(port) == 503
            assert await status(port, "/healthz") == 200  # alive: no restart wanted
            await asyncio.sleep(1.0)
        assert w.logged("db_unavailable")

        await asyncio.to_thread(private_pg.start)
        back = time.monotonic()
        async with Queue.connect(private_pg.dsn, prefix=prefix, max_size=2) as queue:
            fresh = (await queue.enqueue(Slow(seconds=0, marks=str(marks)))).id
            enqueued = time.monotonic() - back
            await wait_for(lambda: _code(port, 200), timeout=30, what="/readyz 200 again")
            ready = time.monotonic() - back
            await wait_for(lambda: str(fresh) in marked(marks, ".start"), timeout=30,
                           what="the first new job to be picked up")
            picked = time.monotonic() - back
            for id in inflight:
                await wait_for(lambda id=id: _completed(queue, id), timeout=30,
                               what="the buffered settlements")
                row = await queue.job(id)
                assert row is not None and row.run_count == 1  # settled, not re-run
                assert [(e.run_no, e.outcome) for e in await queue.journal(id)] == [
                    (1, Outcome.COMPLETED)]
            await wait_for(lambda: _completed(queue, fresh), what="the new job")
        print(f"\noutage {OUTAGE:.0f} s: /readyz 503 {not_ready_after:.2f} s after the stop;"
              f" after the database was back: enqueue {enqueued:.2f} s, /readyz 200"
              f" {ready:.2f} s, first new job picked up {picked:.2f} s")
        assert w.alive() and w.logged("db_available")
        w.terminate()
        assert await asyncio.to_thread(w.wait, 30) == 0
    finally:
        if w.alive():
            w.kill9()
        if private_pg.running():
            await drop_prefix(private_pg.dsn, prefix)


async def _ready(port: int, w: WorkerProc) -> bool:
    assert w.alive(), w.errors()
    return await status(port) == 200


async def _code(port: int, code: int) -> bool:
    return await status(port) == code


async def _completed(queue: Queue, id: UUID) -> bool:
    row = await queue.job(id)
    return row is not None and row.status is Status.COMPLETED
