"""No cost without tracing (docs/operations/tracing.md): without the extra, with it
installed but unused, and with the API imported but no provider set, venturi enqueues
and runs as ever, stores no trace context and gives tasks no span."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness import drop_prefix
from tests.conftest import new_prefix

ROOT = Path(__file__).resolve().parents[2]


async def run(dsn: str, mode: str) -> dict[str, Any]:
    prefix = new_prefix()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.tracing.untraced", dsn, prefix, mode, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await drop_prefix(dsn, prefix)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
    return result


@pytest.mark.parametrize("mode", ["hidden", "absent", "api"])
async def test_untraced_process_stores_nothing_and_runs_without_a_span(
        pg_dsn: str, mode: str) -> None:
    result = await run(pg_dsn, mode)
    # Five jobs run (one merged into its twin), none saw a span, none stores a context.
    assert result["spans"] == ["None"] * 5
    assert result["contexts"] == [None] * 6
    assert result["imported"] is (mode == "api")
