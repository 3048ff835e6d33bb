"""The processes venturi runs (``venturi worker``, ``venturi dev``) render every log
line of the process through one formatter: venturi's events, the tasks' own
structlog and ``logging`` calls, and the records of its dependencies (asyncpg,
uvicorn, ``warnings``), one JSON object per line with the exception as a field
(docs/operations/logging.md). The JSON and console output of venturi's own events is
asserted by tests/cli/test_worker.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import venturi
import venturi.logs
from tests.conftest import drop_prefix

ROOT = Path(__file__).resolve().parent.parent


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
                          timeout=60, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` as a JSON object (a line that is not one fails the test)."""
    return [json.loads(line) for line in text.splitlines()]


def test_json_is_one_line_per_record_from_every_logger_exceptions_as_a_field(
        pg_dsn: str) -> None:
    done = python('''
        import asyncio, logging, os, threading, warnings
        import asyncpg, structlog
        import venturi.logs
        from venturi.logs import get_logger

        venturi.logs.configure("json", "info")
        log = get_logger("venturi.worker")
        log.info("worker_started", worker="w1", kinds=["a"])
        log.debug("job_claimed", job_id="j1")  # below --log-level: not rendered
        structlog.get_logger().info("task_said", n=1)  # a task's own structlog call
        logging.getLogger("myapp.tasks").info("fetched %s\\nin two lines", "x")
        logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
        warnings.warn("an old API")

        # asyncpg's own multi-line record: its pool fails to restore its connection
        # floor (a refused reconnection; here the connection's init refuses).
        logged = threading.Event()
        class Seen(logging.Handler):
            def emit(self, record):
                logged.set()
        logging.getLogger("asyncpg.pool").addHandler(Seen())

        async def main():
            calls = []
            async def init(conn):
                calls.append(conn)
                if len(calls) > 1:
                    raise RuntimeError("refused\\non purpose")
            pool = await asyncpg.create_pool(os.environ["DSN"], min_size=1, max_size=1,
                                             init=init)
            async with pool.acquire() as conn:
                conn.terminate()
            deadline = asyncio.get_running_loop().time() + 30
            while not logged.is_set():
                assert asyncio.get_running_loop().time() < deadline, "asyncpg logged nothing"
                await asyncio.sleep(0.01)
            pool.terminate()

        asyncio.run(main())
    ''', DSN=pg_dsn)
    assert done.stderr == ""
    events = json_lines(done.stdout)
    by_name = {e["event"].split()[0]: e for e in events}
    assert "job_claimed" not in by_name
    # venturi's events keep the fields, and the order, they always had.
    assert list(by_name["worker_started"]) == ["worker", "kinds", "event", "level", "timestamp"]
    assert by_name["task_said"]["n"] == 1
    assert by_name["fetched"] == {**by_name["fetched"], "event": "fetched x\nin two lines",
                                  "logger": "myapp.tasks", "level": "info"}
    assert by_name["Started"]["event"] == "Started server process [42]"
    (warned,) = [e for e in events if e.get("logger") == "py.warnings"]
    assert "UserWarning: an old API" in warned["event"] and warned["level"] == "warning"
    pool = by_name["Failed"]
    assert pool["event"] == "Failed to restore the pool connection floor; retrying"
    assert (pool["logger"], pool["level"]) == ("asyncpg.pool", "warning")
    (error,) = pool["exception"]
    assert (error["exc_type"], error["exc_value"]) == ("RuntimeError", "refused\non purpose")
    assert error["frames"] and all("locals" not in frame for frame in error["frames"])


def test_reset_puts_back_what_configure_changed() -> None:
    root, venturi_logger = logging.getLogger(), logging.getLogger("venturi")
    before = (root.level, root.handlers[:], venturi_logger.level, logging.getLoggerClass(),
              structlog.is_configured(), structlog.get_config(), warnings.showwarning)
    venturi.logs.configure("json", "debug")
    venturi.logs.configure("console", "warning")  # again: still one handler of its own
    try:
        assert len([h for h in root.handlers if h not in before[1]]) == 1
        assert root.level == logging.WARNING and venturi_logger.level == logging.NOTSET
        assert warnings.showwarning is not before[6]
    finally:
        venturi.logs.reset()
    assert (root.level, root.handlers, venturi_logger.level, logging.getLoggerClass(),
            structlog.is_configured(), structlog.get_config(), warnings.showwarning) == before


class Relay:
    """A TCP relay to PostgreSQL, cut on demand: to the worker behind it, the database
    has gone away (refused reconnections), as in a restart or a partition."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.writers: set[asyncio.StreamWriter] = set()
        self.server = self._call(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port: int = self.server.sockets[0].getsockname()[1]

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def cut(self) -> None:
        async def go() -> None:
            self.server.close()
            for writer in self.writers:
                writer.transport.abort()
        self._call(go())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def relay(pg_dsn: str) -> Iterator[Relay]:
    from urllib.parse import urlsplit

    where = urlsplit(pg_dsn)
    r = Relay(where.hostname or "127.0.0.1", where.port or 5432)
    yield r
    r.close()


@pytest.mark.faults
def test_venturi_worker_losing_its_database_logs_json_lines_only(
        pg_dsn: str, prefix: str, relay: Relay, tmp_path: Path) -> None:
    """The outage of issue 20: asyncpg's traceback ("Failed to restore the pool
    connection floor") used to land on stderr between the worker's JSON lines."""
    async def migrate() -> None:
        async with venturi.Queue.connect(pg_dsn, prefix=prefix) as q:
            await q.migrate()
    asyncio.run(migrate())
    dsn = pg_dsn.replace(f":{relay.upstream[1]}/", f":{relay.port}/", 1)
    assert str(relay.port) in dsn
    out, err = tmp_path / "out", tmp_path / "err"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    with open(out, "w") as stdout, open(err, "w") as stderr:
        worker = subprocess.Popen(
            [str(Path(sys.executable).parent / "venturi"), "worker", "--app",
             "tests.cli_app_tasks", "--dsn", dsn, "--prefix", prefix, "--grace", "1s",
             "--log-format", "json"], stdout=stdout, stderr=stderr, cwd=ROOT, env=env)
    try:
        def logged(text: str) -> None:
            deadline = time.monotonic() + 30
            while text not in out.read_text() + err.read_text():
                assert worker.poll() is None, (out.read_text(), err.read_text())
                assert time.monotonic() < deadline, f"timed out waiting for {text!r}"
                time.sleep(0.05)

        logged('"event": "worker_started"')
        relay.cut()
        logged("Failed to restore the pool connection floor")
        logged('"event": "db_unavailable"')
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        asyncio.run(drop_prefix(pg_dsn, prefix))
    assert err.read_text() == ""
    events = json_lines(out.read_text())
    (pool, *_) = [e for e in events if e.get("logger") == "asyncpg.pool"]
    assert pool["level"] == "warning" and pool["exception"][0]["exc_type"]
    assert events[-1]["event"] == "worker_stopped"
