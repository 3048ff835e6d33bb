"""A worker's ``--http`` on the web stack: the probes, and with ``--dashboard`` the
dashboard on the same address, signals staying the worker's; without the ``web``
extra, one line naming it."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

import venturi
from tests.cli.conftest import APP, ROOT, Cli, bare, cli, one_line_error, venturi_script
from tests.cli_app_tasks import Echo
from tests.conftest import wait_for
from tests.web.conftest import TOKEN
from tests.web.tasks import Hourly
from venturi import MemoryStore, Queue
from venturi.web import TokenAuth
from venturi.worker.http import WEB_EXTRA

__all__ = ["bare", "cli"]  # the CLI suite's fixtures, used here
pytestmark = pytest.mark.timeout(90)

BLOCK_STARLETTE = "import sys; sys.modules['starlette'] = None; "


class Tick(venturi.Task, kind="webworker.tick", every=dt.timedelta(hours=1)):
    async def run(self, ctx: venturi.Context) -> None:
        return None


async def test_the_dashboard_and_the_probes_share_the_workers_address(web_queue: Queue) -> None:
    worker = venturi.Worker(web_queue, tasks=[Tick], http="127.0.0.1:0", dashboard=True,
                            dashboard_auth=TokenAuth(TOKEN))
    runner = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: worker.health.ready, what="the worker ready")
        assert worker.http is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{worker.http.port}",
                                     timeout=10) as http:
            assert (await http.get("/readyz")).text == "ready\n"
            assert "venturi_jobs_claimed_total" in (await http.get("/metrics")).text
            overview = await http.get("/")
            assert overview.status_code == 200 and "Overview" in overview.text
            assert "sign in to act" in overview.text
            assert (await http.get("/login")).status_code == 200
            # The periodic page shows the worker's own schedules, not every task imported.
            periodic = (await http.get("/periodic")).text
            assert "webworker.tick" in periodic and Hourly.__task__.kind not in periodic
            refused = await http.post("/actions/confirm", data={"action": "drain",
                                                                 "scope": "worker"})
            assert refused.status_code == 403  # no CSRF token, no sign-in
            worker.request_drain(0)
            await wait_for(lambda: not worker.health.ready, what="readiness to drop")
            r = await http.get("/readyz")
            assert (r.status_code, r.text) == (503, "draining\n")
    finally:
        worker.request_drain(0)
        await asyncio.wait_for(runner, 30)
    assert worker.exit_code == 0


async def test_a_read_only_dashboard_has_no_action_routes(web_queue: Queue) -> None:
    worker = venturi.Worker(web_queue, tasks=[Tick], http="127.0.0.1:0", dashboard=True,
                            dashboard_read_only=True, dashboard_auth=TokenAuth(TOKEN))
    runner = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: worker.health.ready, what="the worker ready")
        assert worker.http is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{worker.http.port}",
                                     timeout=10) as http:
            assert (await http.get("/jobs")).status_code == 200
            assert (await http.get("/login")).status_code == 404
            assert (await http.post("/actions/run")).status_code in (404, 405)
    finally:
        worker.request_drain(0)
        await asyncio.wait_for(runner, 30)


def _worker_env(cli: Cli) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env.update(VENTURI_DSN=cli.dsn, VENTURI_PREFIX=cli.prefix, VENTURI_WEB_TOKEN=TOKEN)
    return env


@pytest.fixture
def worker_proc(cli: Cli) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [venturi_script(), "worker", "--app", APP, "--grace", "5s", "--log-format", "json",
         "--http", "127.0.0.1:0", "--dashboard"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=_worker_env(cli))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _listening(proc: subprocess.Popen[str]) -> dict[str, object]:
    assert proc.stdout is not None
    for line in proc.stdout:
        event = json.loads(line)
        if event.get("event") == "http_listening":
            return event
    raise AssertionError(f"the worker exited before it served: {proc.communicate()}")


@pytest.mark.slow
def test_sigterm_drains_a_worker_serving_its_dashboard(
    cli: Cli, worker_proc: subprocess.Popen[str]
) -> None:
    """uvicorn takes no signal from the worker: SIGTERM drains it (exit 0), and an
    event stream left open does not hold its exit up."""
    cli.do(lambda q: q.enqueue(Echo(uri="file:///served")))
    listening = _listening(worker_proc)
    assert listening["dashboard"] is True
    url = f"http://127.0.0.1:{listening['port']}"
    with httpx.Client(base_url=url, timeout=10) as http:
        deadline = time.monotonic() + 30
        while http.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the worker never became ready"
            time.sleep(0.1)
        assert "Overview" in http.get("/").text
        with http.stream("GET", "/events/overview") as events:
            lines = events.iter_lines()
            assert next(lines) == "retry: 500"
            worker_proc.send_signal(signal.SIGTERM)
            began = time.monotonic()
            list(lines)  # ended by the server's shutdown
            assert time.monotonic() - began < 15
    out, err = worker_proc.communicate(timeout=30)
    assert worker_proc.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    names = [e["event"] for e in events]
    assert "drain_requested" in names and names[-1] == "worker_stopped"
    assert {"signal": "SIGTERM", "action": "drain"}.items() <= next(
        e for e in events if e["event"] == "signal_received").items()
    assert "Traceback" not in err and TOKEN not in out + err


def test_option_errors_are_one_line(cli: Cli) -> None:
    def worker(*args: str) -> str:
        return one_line_error(cli("worker", "--app", APP, *args), code=2)

    assert "give --http" in worker("--dashboard")
    assert "give --dashboard" in worker("--http", "127.0.0.1:0", "--read-only")
    line = worker("--http", "127.0.0.1:0", "--dashboard", "--token", "short")
    assert "at least 8 characters" in line and "short" not in line.split(":", 2)[2]


def test_without_the_extra_http_names_it(cli: Cli) -> None:
    code = (BLOCK_STARLETTE + "from venturi.cli import main; "
            f"sys.argv = ['venturi', 'worker', '--app', {APP!r}, '--http', '127.0.0.1:0']; "
            "main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60, check=False, env=_worker_env(cli))
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == f"venturi: error: {WEB_EXTRA}"
    # The library says the same, before anything starts.
    code = (BLOCK_STARLETTE + "import venturi\n"
            "from tests.cli_app_tasks import Echo\n"
            "try:\n"
            "    venturi.Worker(venturi.Queue(venturi.MemoryStore()), [Echo], http='127.0.0.1:0')\n"
            "except venturi.ConfigError as exc:\n"
            "    print(exc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60, check=False)
    assert (r.returncode, r.stdout.strip()) == (0, WEB_EXTRA), r.stderr
    assert MemoryStore  # the in-process store needs no extra either
