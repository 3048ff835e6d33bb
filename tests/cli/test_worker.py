"""`venturi worker` as a real subprocess, stopped by `venturi drain`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

import venturi
from tests.cli_app_tasks import Echo

from .conftest import APP, ROOT, Cli, one_line_error, venturi_script


def start_worker(cli: Cli, *args: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    environ.update(VENTURI_DSN=cli.dsn, VENTURI_PREFIX=cli.prefix)
    return subprocess.Popen(
        [venturi_script(), "worker", "--app", APP, *args],
        cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def wait_until(cli: Cli, predicate: object, what: str, proc: subprocess.Popen[str],
               timeout: float = 30) -> None:
    """Poll a queue predicate with a deadline; fail early if the worker died."""
    async def check(q: venturi.Queue) -> bool:
        return bool(await predicate(q))  # type: ignore[operator]

    deadline = time.monotonic() + timeout
    while not cli.do(check):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"worker exited {proc.returncode} before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow
def test_worker_runs_jobs_logs_json_and_exits_0_after_drain(
    cli: Cli, reap: list[subprocess.Popen[str]]
) -> None:
    job = cli.do(lambda q: q.enqueue(Echo(uri="file:///w", words=4)))
    with socket.socket() as probe:  # a free port for the health endpoint
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = start_worker(cli, "--concurrency", "3", "--name", "cli-test-w1", "--grace", "5s",
                        "--prefetch", "4", "--kinds", "cli.echo", "--retention", "completed=1d",
                        "--http", f"127.0.0.1:{port}")
    reap.append(proc)

    async def registered(q: venturi.Queue) -> bool:
        return any(w.name == "cli-test-w1" for w in await q.workers())

    async def done(q: venturi.Queue) -> bool:
        record = await q.job(job.id)
        return record is not None and record.status is venturi.Status.COMPLETED

    wait_until(cli, registered, "the worker to register", proc)
    wait_until(cli, done, "the job to complete", proc)

    listed = json.loads(cli.ok("workers", "--json").stdout)["workers"]
    (me,) = [w for w in listed if w["name"] == "cli-test-w1"]
    assert (me["kinds"], me["concurrency"], me["pid"]) == (["cli.echo"], 3, proc.pid)
    entry = cli.do(lambda q: q.journal(job.id))[-1]
    assert (entry.outcome, entry.note, entry.attachment) == (
        venturi.Outcome.COMPLETED, "echoed file:///w", {"words": 4})

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
        assert response.status == 200

    drained = cli.ok("drain", "--worker", "cli-test-w1", "--wait", "--timeout", "30s")
    assert drained.stdout.strip() == "drained worker cli-test-w1"
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (out, err)
    # stdout is a pipe, not a terminal: one JSON object per line.
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    names = [e["event"] for e in events]
    assert "worker_started" in names and "drain_requested" in names
    assert names[-1] == "worker_stopped" and events[-1]["exit_code"] == 0
    assert "Traceback" not in err
    assert json.loads(cli.ok("workers", "--json").stdout) == {"workers": []}


@pytest.mark.slow
def test_drain_all_stops_every_worker_and_console_logs_on_request(
    cli: Cli, reap: list[subprocess.Popen[str]]
) -> None:
    procs = [start_worker(cli, "--name", f"cli-test-a{i}", "--log-format", "console")
             for i in range(2)]
    reap.extend(procs)

    async def both(q: venturi.Queue) -> bool:
        return len(await q.workers()) == 2

    wait_until(cli, both, "two workers", procs[0])
    doc = json.loads(cli.ok("drain", "--all", "--grace", "1s", "--json").stdout)
    assert doc["sent"] == {"op": "drain", "worker": None, "grace": 1.0}
    assert sorted(doc["workers"]) == ["cli-test-a0", "cli-test-a1"]
    for proc in procs:
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, (out, err)
        assert "worker_started" in out
        with pytest.raises(json.JSONDecodeError):
            json.loads(out.splitlines()[0])  # readable lines, not JSON


def test_drain_and_worker_option_errors(cli: Cli) -> None:
    one_line_error(cli("drain"), code=2)
    one_line_error(cli("drain", "--all", "--worker", "x"), code=2)
    assert "--grace" in one_line_error(cli("drain", "--all", "--grace", "forever"), code=2)
    line = one_line_error(cli("drain", "--worker", "ghost"))
    assert "no worker named 'ghost'" in line
    assert json.loads(cli.ok("drain", "--all", "--json").stdout)["workers"] == []

    def worker(*args: str) -> str:
        return one_line_error(cli("worker", "--app", APP, *args), code=2)

    assert "--retention" in worker("--retention", "pending=1d")
    assert "--retention completed" in worker("--retention", "completed=soon")
    assert "--grace" in worker("--grace", "x")
    assert "--prefetch" in worker("--prefetch", "lots")
    assert "--prefetch" in worker("--prefetch", "10001")
    assert "--log-format" in worker("--log-format", "xml")
    assert "--maintenance" in worker("--maintenance", "sometimes")
    assert "--gc-threshold" in worker("--gc-threshold", "-1")
    assert "--gc-threshold" in worker("--gc-threshold", "lots")
    assert "--http" in worker("--http", "nowhere")
    assert "worker name" in worker("--name", "a/b")
    line = one_line_error(cli("worker", "--app", APP, "--kinds", "cli.echo,nope,zzz"))
    assert "--kinds: unknown kinds 'nope', 'zzz'; tests.cli_app_tasks defines" in line


def test_worker_refuses_a_name_held_by_a_live_worker(
    cli: Cli, reap: list[subprocess.Popen[str]]
) -> None:
    first = start_worker(cli, "--name", "cli-test-dup")
    reap.append(first)

    async def up(q: venturi.Queue) -> bool:
        return any(w.name == "cli-test-dup" for w in await q.workers())

    wait_until(cli, up, "the first worker", first)
    second = cli.subprocess("worker", "--app", APP, "--name", "cli-test-dup",
                            env={"VENTURI_DSN": cli.dsn, "VENTURI_PREFIX": cli.prefix})
    assert second.returncode == 1, (second.stdout, second.stderr)
    assert "Traceback" not in second.stdout + second.stderr
    assert second.stderr.strip().startswith("venturi: error:")
    assert "cli-test-dup" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=30)
    assert first.returncode == 0, (out, err)
