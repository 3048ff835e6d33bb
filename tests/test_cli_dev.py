"""``venturi dev`` end to end, as a user runs it (a subprocess of the real entry point)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from venturi.cli import app

from tests.conftest import drop_prefix
from venturi import Queue, embedded

VENTURI = [sys.executable, "-c", "from venturi.cli import main; main()"]


def venturi(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    return subprocess.run([*VENTURI, *args], capture_output=True, text=True, timeout=90,
                          env={**base, **(env or {})})


def postmasters_under(path: Path) -> list[int]:
    """Live (non-zombie) processes whose command line names ``path``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmdline and embedded._running(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not embedded.available(), reason=embedded.INSTALL_HINT)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs procfs to look for leftovers")
def test_dev_embedded_runs_the_examples_and_leaves_nothing_running() -> None:
    result = venturi("dev", "--jobs", "12", "--latency", "0")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    match = re.search(r"^data directory: (\S+) \(removed on exit\)$", out, re.MULTILINE)
    assert match, out
    data_dir = Path(match.group(1))
    assert "migrated: 0001_init.sql" in out
    assert re.search(r"enqueued 12 example jobs \(1 merged", out), out
    assert "11/11 finished" in out and "done in" in out and ", 0 dead," in out
    assert re.search(r"run 3: completed +reindexed", out), out
    assert out.rstrip().endswith("stopped: nothing left running")
    assert not data_dir.exists()
    assert postmasters_under(data_dir) == []


@pytest.mark.slow
async def test_dev_on_a_given_database(pg_dsn: str, prefix: str) -> None:
    try:
        queued = venturi("dev", "--enqueue-only", "--jobs", "9",
                         env={"VENTURI_DSN": pg_dsn, "VENTURI_PREFIX": prefix})
        assert queued.returncode == 0, queued.stderr
        assert "finished" not in queued.stdout
        async with Queue.connect(pg_dsn, prefix=prefix, max_size=2) as queue:
            assert await queue.count(statuses=["pending"]) == 8  # one summary pair merged

        ran = venturi("--dsn", pg_dsn, "dev", "--prefix", prefix, "--jobs", "4",
                      "--latency", "0")
        assert ran.returncode == 0, ran.stderr
        assert "embedded" not in ran.stdout and "schema is up to date" in ran.stdout
        async with Queue.connect(pg_dsn, prefix=prefix, max_size=2) as queue:
            # The worker ran what --enqueue-only left too. The periodic sweep is left out:
            # its occurrence waits for the next minute, which may fall inside the run.
            sweep = "examples.sweep"
            assert await queue.count(kind=sweep, statuses=["pending"]) == 1
            done = await queue.count(statuses=["completed"])
            assert done - await queue.count(kind=sweep, statuses=["completed"]) == 8 + 4
            assert await queue.count(statuses=["pending"]) == 1
    finally:
        await drop_prefix(pg_dsn, prefix)


@pytest.mark.parametrize(("args", "message"), [
    (["dev", "--enqueue-only"], "--enqueue-only needs a database"),
    (["dev", "--latency", "soon"], "--latency: 'soon' is not a duration"),
    (["dev", "--prefix", "Bad-Prefix"], "invalid prefix 'Bad-Prefix'"),
    (["--dsn", "postgresql://x/y", "dev", "--data-dir", "/tmp/x"], "--data-dir is for the"),
])
def test_dev_refuses_bad_input_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args, env={"VENTURI_DSN": None, "VENTURI_PREFIX": None})
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("venturi: error: ") and message in lines[0]
