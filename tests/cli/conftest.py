"""CLI fixtures: the Typer app run in-process against a fresh, migrated prefix.

CLI tests are plain (sync) functions: each command runs its own event loop, so
setup that needs the queue goes through ``Cli.do`` (``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner, Result
from venturi.cli import app

import venturi
from venturi.store.base import Action, ClaimRequest, Settlement

from ..conftest import drop_prefix, new_prefix

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
APP = "tests.cli_app_tasks"


def venturi_script() -> str:
    """The installed console script, next to the running interpreter."""
    path = Path(sys.executable).parent / "venturi"
    return str(path) if path.exists() else (shutil.which("venturi") or "venturi")


class Cli:
    def __init__(self, dsn: str, prefix: str) -> None:
        self.dsn = dsn
        self.prefix = prefix
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None,
                 env: dict[str, str | None] | None = None) -> Result:
        """Run ``venturi ARGS`` with the queue given through the environment."""
        environ: dict[str, str | None] = {"VENTURI_DSN": self.dsn, "VENTURI_PREFIX": self.prefix,
                                          "VENTURI_APP": None}
        environ.update(env or {})
        return self.runner.invoke(app, list(args), input=input, env=environ)

    def ok(self, *args: str, input: str | None = None) -> Result:
        result = self(*args, input=input)
        assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
        return result

    def do(self, fn: Callable[[venturi.Queue], Awaitable[T]]) -> T:
        """Run ``fn`` on a queue handle (test setup and checks)."""
        async def go() -> T:
            async with venturi.Queue.connect(self.dsn, prefix=self.prefix, max_size=2) as q:
                return await fn(q)
        return asyncio.run(go())

    def subprocess(self, *args: str, env: dict[str, str] | None = None,
                   timeout: float = 60) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
        environ.update(env or {})
        return subprocess.run([venturi_script(), *args], capture_output=True, text=True,
                              cwd=ROOT, env=environ, timeout=timeout, check=False)


@pytest.fixture
def cli(pg_dsn: str) -> Iterator[Cli]:
    c = Cli(pg_dsn, new_prefix())
    c.ok("migrate")
    try:
        yield c
    finally:
        asyncio.run(drop_prefix(pg_dsn, c.prefix))


@pytest.fixture
def bare(pg_dsn: str) -> Iterator[Cli]:
    """A prefix nobody migrated."""
    c = Cli(pg_dsn, new_prefix())
    try:
        yield c
    finally:
        asyncio.run(drop_prefix(pg_dsn, c.prefix))


async def settle(queue: venturi.Queue, kind: str, action: Action, note: str | None = None,
                 limit: int = 100) -> list[venturi.JobRecord]:
    """Claim runnable jobs of ``kind`` and settle them with ``action``, as a worker would."""
    claimed = await queue.store.claim(ClaimRequest(
        claimed_by="test/boot", leases={kind: dt.timedelta(seconds=30)}, limit=limit))
    await queue.store.settle_many("test/boot", [
        Settlement(id=j.id, run_no=j.run_count, action=action, note=note) for j in claimed])
    return claimed


async def claim(queue: venturi.Queue, kind: str, limit: int = 1) -> list[venturi.JobRecord]:
    return await queue.store.claim(ClaimRequest(
        claimed_by="test/boot", leases={kind: dt.timedelta(seconds=30)}, limit=limit))


def one_line_error(result: Any, code: int = 1) -> str:
    """Assert the result is exactly one ``venturi: error:`` line on stderr; return it."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("venturi: error: "), lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == "", result.stdout  # --json consumers never get half a document
    return str(lines[0])
