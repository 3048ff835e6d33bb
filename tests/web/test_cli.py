"""``venturi web`` as an operator runs it, and ``import venturi`` without the extra."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.cli.conftest import ROOT, Cli, bare, cli, one_line_error
from tests.web.conftest import TOKEN

__all__ = ["bare", "cli"]  # the CLI suite's fixtures, used here
pytestmark = pytest.mark.timeout(90)

BLOCK_STARLETTE = "import sys; sys.modules['starlette'] = None; "


def test_bad_options_are_one_line(cli: Cli) -> None:
    line = one_line_error(cli("web", "--http", "localhost"), code=2)
    assert "is not HOST:PORT" in line
    line = one_line_error(cli("web", "--token", "short"), code=2)
    assert "at least 8 characters" in line and "short" not in line.split(":", 2)[2]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(cli("web", "--http", f"127.0.0.1:{port}"), code=2)
        assert "cannot listen there" in line


def test_a_missing_schema_is_one_line(bare: Cli) -> None:
    line = one_line_error(bare("web", "--http", "127.0.0.1:0"))
    assert "migrate" in line


def test_without_the_extra_the_command_names_it() -> None:
    code = (BLOCK_STARLETTE + "from venturi.cli import main; "
            "sys.argv = ['venturi', 'web', '--dsn', 'postgresql://nobody@127.0.0.1:1/x']; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=60, check=False)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == ("venturi: error: venturi web needs the web extra: "
                                "pip install 'venturi[web]'")


def test_import_venturi_needs_no_extra() -> None:
    code = (BLOCK_STARLETTE + "import venturi, venturi.cli; "
            "assert not [m for m in sys.modules if m.startswith(('venturi.web', 'jinja2'))]\n"
            "try:\n    import venturi.web\nexcept ImportError as exc:\n    print(exc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("the dashboard needs the web extra: pip install 'venturi[web]' "
                                "(starlette is missing)")


# The console script's own lines (``.venv/bin/venturi``), with uvicorn's wait for requests
# still open at shutdown (venturi/web/server.py GRACE, 5 s) made 30 s: a stream that held
# the shutdown up would take that long, far from what a busy machine adds to a prompt end.
WEB_WITH_LONG_GRACE = ("import sys; import venturi.web.server; venturi.web.server.GRACE = 30.0; "
                       "from venturi.cli import main; sys.argv[0] = 'venturi'; sys.exit(main())")


def test_serves_until_sigterm_even_with_a_live_stream_open(cli: Cli) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env.update(VENTURI_DSN=cli.dsn, VENTURI_PREFIX=cli.prefix, VENTURI_WEB_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [sys.executable, "-c", WEB_WITH_LONG_GRACE, "web", "--http", "127.0.0.1:0",
         "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())
        assert started["event"] == "dashboard_listening" and started["mode"] == "actions"
        url = started["url"]
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.get("/").status_code == 200
            assert "sign in to act" in http.get("/").text
            with http.stream("GET", "/events/overview") as events:
                assert events.headers["content-type"].startswith("text/event-stream")
                lines = events.iter_lines()
                assert next(lines) == "retry: 500"
                began = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                rest = list(lines)  # the server ends the stream: no graceful-shutdown wait
                assert time.monotonic() - began < 10, "the stream held the shutdown up"
        assert any(line.startswith("event: counts") for line in rest)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert TOKEN not in out + err + json.dumps(started)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
