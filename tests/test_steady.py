"""The steady-state benchmark at CI size (benchmarks/steady.py; the full runs on private
clusters are in benchmarks/results-steady.md): a producer at a fixed rate against two
``venturi worker`` processes with retention, the maintenance loops running, every job's
pickup lag recorded, nothing left behind."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from benchmarks.steady import steady
from benchmarks.steady_report import quarters, render, verdict

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_steady_quick(pg_dsn: str, tmp_path: Path) -> None:
    result = await steady(pg_dsn, rate=200, seconds=12, interval=0.5, drain_timeout=30,
                          maintenance=True, explain=True, logdir=tmp_path)
    assert result.exit_codes == [0, 0]
    assert 2_000 <= result.sent <= 2_400
    assert result.empty_after is not None and result.left_pending == result.left_claimed == 0
    # Every job ran (at least once) and has its lag, measured from its send time.
    assert len(result.lags) >= result.sent and all(ms >= 0 for _, ms in result.lags)
    assert all(q.lags and q.samples for q in quarters(result))
    assert all(s.explain and s.explain["index"] for s in result.samples)
    v = verdict(result)
    assert v.left_behind == 0 and v.unhandled == 0 and v.lag_p99 > 0
    text = render(result, "python -m benchmarks.steady --minutes 0.2 --rate 200")
    assert text.count("\n| Q") == 4 and "pickup lag p99" in text
    conn = await asyncpg.connect(pg_dsn)  # the prefix is gone
    try:
        assert await conn.fetchval("SELECT count(*) FROM pg_tables WHERE tablename LIKE $1",
                                   f"{result.options['prefix']}%") == 0
    finally:
        await conn.close()
