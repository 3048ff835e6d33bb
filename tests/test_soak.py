"""The soak at CI size (benchmarks/soak.py; the full 200,000-job run is in
benchmarks/results-soak.md): two ``venturi worker`` processes drain a fresh prefix
while the driver samples throughput, worker RSS and dead tuples."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from benchmarks.soak import render, soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_soak_quick(pg_dsn: str, tmp_path: Path) -> None:
    jobs = 3_000
    result = await soak(pg_dsn, jobs, interval=0.2, vacuum_every=1.0, logdir=tmp_path)
    assert result.not_completed == 0 and result.left_claimed == 0
    assert result.exit_codes == [0, 0]
    assert result.samples[-1].completed == jobs
    assert all(k is not None and k > 20_000 for k in result.samples[-1].rss_kib)  # KiB, booted
    assert result.driver_vacuums >= 1
    assert result.rate(0.0, 0.1) > 0 and result.rate(0.9, 1.0) > 0
    text = render(result, "python -m benchmarks.soak --jobs 3000")
    assert "throughput first 10 %" in text and text.count("\n| ") == 11
    # The prefix is gone.
    conn = await asyncpg.connect(pg_dsn)
    try:
        left = await conn.fetchval("SELECT count(*) FROM pg_tables WHERE tablename LIKE $1",
                                   f"{result.prefix}%")
    finally:
        await conn.close()
    assert left == 0
