"""Consumer spans across a real worker process (docs/operations/tracing.md): jobs enqueued
here under a traced request, run by a worker process that records its own spans; the
creation context crosses in the database. Each run is a ``process`` span starting a
trace of its own, linked to its job's ``send`` span, with the run number and outcome;
a failure is recorded and marks the span; the task's own spans nest under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from venturi import Queue, Status
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .recording import Recorded
from .tasks import Doomed, Flaky, Ok, Stuck

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).resolve().parents[2]


class TracedWorker:
    def __init__(self, dsn: str, prefix: str, tmp: Path) -> None:
        self.spans_file = tmp / "spans.json"
        self.log = tmp / "worker.log"
        with open(self.log, "wb") as sink:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tests.tracing.proc", "--dsn", dsn, "--prefix", prefix,
                 "--spans", str(self.spans_file)],
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=sink,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def logged(self, event: str) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(f"worker exited early:\n{self.log.read_text()}")
        return f'"event": "{event}"' in self.log.read_text(errors="replace")

    def spans(self) -> list[dict[str, Any]]:
        assert self.popen.wait(30) == 0, self.log.read_text()
        spans: list[dict[str, Any]] = json.loads(self.spans_file.read_text())
        return spans


@pytest.fixture
def pgq(pg_store_dbclock: PostgresStore) -> Queue:
    return Queue(pg_store_dbclock)


@pytest.fixture
def traced_worker(pg_dsn: str, pgq: Queue, tmp_path: Path) -> Iterator[Any]:
    started: list[TracedWorker] = []

    def start() -> TracedWorker:
        started.append(TracedWorker(pg_dsn, pgq.prefix, tmp_path))
        return started[-1]

    yield start
    for proc in started:
        if proc.popen.poll() is None:
            proc.popen.kill()
            proc.popen.wait(10)


def process_attributes(kind: str, job_id: Any, run: int, outcome: str) -> dict[str, Any]:
    return {"messaging.system": "venturi", "messaging.operation.type": "process",
            "messaging.operation.name": "process", "messaging.destination.name": kind,
            "messaging.message.id": str(job_id), "messaging.venturi.run_number": run,
            "messaging.venturi.outcome": outcome}


async def test_each_run_is_a_process_span_linked_to_its_send_span(
        pgq: Queue, spans: Recorded, traced_worker: Any) -> None:
    with trace.get_tracer("tests").start_as_current_span("request"):
        ok, flaky, doomed, stuck = [
            (await pgq.enqueue(task)).id for task in (Ok(), Flaky(), Doomed(), Stuck())]
    sent = {s["attributes"]["messaging.message.id"]: s for s in spans.spans()
            if s["name"].startswith("send ")}
    worker = traced_worker()

    async def settled() -> bool:
        rows = {id: await pgq.job(id) for id in (ok, flaky, doomed, stuck)}
        return all(r is not None for r in rows.values()) and [
            r.status for r in rows.values() if r is not None] == [
            Status.COMPLETED, Status.COMPLETED, Status.DEAD, Status.CLAIMED]
    await wait_for(settled, timeout=30, what="three jobs to settle and one to run")
    running = await pgq.job(stuck)
    assert running is not None and running.claimed_by is not None
    assert await pgq.cancel(ids=[stuck]) == 1
    await wait_for(lambda: worker.logged("job_cancelled"), timeout=30,
                   what="the worker to stop the cancelled run")
    await pgq.drain()
    recorded = worker.spans()

    runs = {(s["attributes"]["messaging.message.id"], s["attributes"][
        "messaging.venturi.run_number"]): s for s in recorded if s["name"].startswith("process")}
    expected = {(ok, 1): "completed", (flaky, 1): "retried", (flaky, 2): "completed",
                (doomed, 1): "dead", (stuck, 1): "cancelled"}
    assert set(runs) == {(str(id), run) for id, run in expected}
    kinds = {ok: "trace.ok", flaky: "trace.flaky", doomed: "trace.doomed", stuck: "trace.stuck"}
    for (id, run), outcome in expected.items():
        span, send = runs[str(id), run], sent[str(id)]
        assert span["name"] == f"process {kinds[id]}" and span["kind"] == "CONSUMER"
        attributes = dict(span["attributes"])
        assert attributes.pop("messaging.client.id") == running.claimed_by
        failed = outcome in ("retried", "dead")
        error = {"error.type": {flaky: "ValueError", doomed: "RuntimeError"}[id]} if failed else {}
        assert attributes == {**process_attributes(kinds[id], id, run, outcome), **error}
        # A trace of its own, linked to the job's send span (whose context the job stored).
        assert span["parent"] is None and span["trace_id"] != send["trace_id"]
        assert span["links"] == [[send["trace_id"], send["span_id"], {}]]
        assert (span["status"], span["exceptions"]) == (
            ("ERROR", [error["error.type"]]) if failed else ("UNSET", []))
    assert len({s["trace_id"] for s in runs.values()}) == len(runs)  # one trace per run

    # The task's own span nests under its run's span, which was the current span.
    (step,) = [s for s in recorded if s["name"] == "step"]
    assert step["parent"] == runs[str(ok), 1]["span_id"]
    assert step["attributes"] == {"test.ctx_span_is_current": True}
    # Nothing else: no seed spans (no periodic task), one span per run.
    assert len(recorded) == len(runs) + 1
