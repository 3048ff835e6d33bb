"""What the Django tests share: a look at the database from outside Django's
connection, a real worker process, and waiting on a condition with a deadline."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection
from django.tasks import default_task_backend

from tests.django.conftest import EXAMPLE


def test_db_dsn() -> str:
    s = connection.settings_dict
    return f"postgresql://{s['USER']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def outside(sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows as another session sees them: only what has been committed."""
    with psycopg.connect(test_db_dsn(), autocommit=True) as other:
        cur = other.execute(sql, args)
        return cur.fetchall() if cur.description else []


def committed_jobs(subject: str | None = None) -> list[tuple[Any, ...]]:
    """(id, kind, status) of the committed jobs, oldest first, optionally of one function."""
    prefix = default_task_backend.prefix
    if subject is None:
        return outside(f"SELECT id::text, kind, status FROM {prefix}jobs ORDER BY id")
    return outside(f"SELECT id::text, kind, status FROM {prefix}jobs WHERE subject = %s "
                   "ORDER BY id", subject)


def clear_jobs() -> None:
    """TransactionTestCase empties the models' tables after each test; venturi's are
    not models, so the tests empty them themselves."""
    outside(f"TRUNCATE {default_task_backend.prefix}jobs")


def until(condition: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["SHOP_DB_NAME"] = str(connection.settings_dict["NAME"])
    env.pop("SHOP_TEST_DB_NAME", None)
    return env


class Worker:
    """A real worker process on the test database: ``python manage.py venturi_worker``
    (or ``venturi worker --django shop.settings`` with ``cli=True``)."""

    def __init__(self, *args: str, cli: bool = False, log: Path) -> None:
        self.name = f"django-test-{secrets.token_hex(3)}"
        if cli:
            cmd = [sys.executable, "-c", "from venturi.cli import main; main()",
                   "worker", "--django", "shop.settings"]
        else:
            cmd = [sys.executable, "manage.py", "venturi_worker"]
        cmd += ["--name", self.name, "--log-format", "json", *args]
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(cmd, cwd=EXAMPLE, env=worker_env(), stdout=self._out,
                                     stderr=subprocess.STDOUT)
        until(self._registered, what=f"worker {self.name} to register")

    def _registered(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the worker exited ({self.proc.returncode}):\n"
                                 + self.log.read_text())
        return any(w.name == self.name for w in default_task_backend.queue.workers())

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        finally:
            self._out.close()
        return code
