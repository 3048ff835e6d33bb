"""The producer examples (examples/), run against real PostgreSQL through their own
stacks: FastAPI's TestClient over the ASGI app, a threaded WSGI server for Flask,
the psycopg script as a process."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from socketserver import ThreadingMixIn
from types import ModuleType
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import asyncpg
import httpx
import pytest

from tests.conftest import drop_prefix
from venturi import Queue, SyncQueue, Worker
from venturi.store.postgres import PostgresStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str, dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import ``examples/<name>.py`` afresh with its settings pointed at the test's
    database and prefix (a module of its own per test: its tables carry the prefix)."""
    monkeypatch.setenv("DATABASE_URL", dsn)
    monkeypatch.setenv("VENTURI_PREFIX", prefix)
    spec = importlib.util.spec_from_file_location(f"examples_{name}_{prefix}",
                                                  EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # SQLAlchemy resolves the models' annotations there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cleanup(pg_dsn: str, prefix: str) -> Iterator[None]:
    yield
    async def drop() -> None:
        conn = await asyncpg.connect(pg_dsn)
        try:
            for table in ("example_orders", "example_users", "example_files"):
                await conn.execute(f"DROP TABLE IF EXISTS {prefix}{table}")
        finally:
            await conn.close()
        await drop_prefix(pg_dsn, prefix)
    asyncio.run(drop())


async def rows(dsn: str, sql: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


def test_fastapi_request_commits_its_row_and_job_together_or_neither(
        pg_dsn: str, prefix: str, cleanup: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    app_module = load("fastapi_app", pg_dsn, prefix, monkeypatch)
    with TestClient(app_module.app) as client:
        ok = client.post("/orders", json={"email": "ann@example.com"})
        assert ok.status_code == 200, ok.text
        bad = client.post("/orders", json={"email": "nobody"})
        assert bad.status_code == 422
    assert asyncio.run(rows(pg_dsn, f"SELECT count(*) FROM {prefix}example_orders")) == 1

    async def check() -> None:
        store = await PostgresStore.connect(pg_dsn, prefix=prefix)
        try:
            queue = Queue(store)
            job = await queue.job(ok.json()["job"])
            assert job is not None and job.payload == {"order_id": ok.json()["order"],
                                                       "email": "ann@example.com"}
            assert await queue.count() == 1  # the failed request's job was rolled back
            await Worker(queue, tasks=[app_module.SendReceipt]).run(until_empty=True)
            assert [e.note for e in await queue.journal(job.id)] == [
                "receipt sent to ann@example.com"]
        finally:
            await store.close()
    asyncio.run(check())


class ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_flask_under_a_threaded_wsgi_server(
        pg_dsn: str, prefix: str, cleanup: None, monkeypatch: pytest.MonkeyPatch) -> None:
    app_module = load("flask_app", pg_dsn, prefix, monkeypatch)
    with SyncQueue.connect(pg_dsn, prefix=prefix, max_size=4) as queue:
        queue.migrate()
        server = make_server("127.0.0.1", 0, app_module.create_app(queue),
                             server_class=ThreadingServer, handler_class=Quiet)
        serving = threading.Thread(target=server.serve_forever, daemon=True)
        serving.start()
        try:
            url = f"http://127.0.0.1:{server.server_port}/signup"

            def post(email: str) -> int:
                with httpx.Client(timeout=30) as client:
                    return client.post(url, json={"email": email}).status_code

            emails = [f"u{n}@example.com" for n in range(16)] + [f"bad{n}" for n in range(4)]
            with ThreadPoolExecutor(8) as pool:
                codes = list(pool.map(post, emails))
        finally:
            server.shutdown()
            server.server_close()
            app_module.engine.dispose()
        assert codes == [201] * 16 + [422] * 4
        assert queue.count(kind="examples.send_welcome") == 16
    assert asyncio.run(rows(pg_dsn, f"SELECT count(*) FROM {prefix}example_users")) == 16


def test_psycopg_script(pg_dsn: str, prefix: str, cleanup: None) -> None:
    env = {**os.environ, "DATABASE_URL": pg_dsn, "VENTURI_PREFIX": prefix}
    proc = subprocess.run([sys.executable, str(EXAMPLES / "psycopg_script.py"), "a.txt", "b.txt"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "2 files, 2 jobs queued"
    assert asyncio.run(rows(pg_dsn, f"SELECT count(*) FROM {prefix}example_files")) == 2
