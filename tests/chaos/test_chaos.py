"""The fault-injection run at its small size (benchmarks/chaos.py has the full one):
real ``venturi worker`` processes killed, replaced, cut off from their backends and
through a PostgreSQL restart, and nothing lost or settled twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos import SIZES, chaos

from ..faults_cluster import PrivateCluster, private_pg  # noqa: F401

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


async def test_chaos_small(private_pg: PrivateCluster, tmp_path: Path) -> None:  # noqa: F811
    size = SIZES["small"]
    result = await chaos(private_pg.dsn, private_pg.restart, size, logdir=tmp_path)
    print(result.block())
    # The faults happened, and hit work in flight...
    assert result.kills >= 5 and result.restarts == 1
    assert result.termination_rounds == size.terminations and result.terminated_backends > 0
    assert result.terminated_listen > 0
    assert not result.unexpected_exits, result.unexpected_exits
    # ... and the promises held.
    assert result.lost == 0
    assert result.double_settlements == 0
    assert result.journal_holes == 0
    assert result.left_claimed == 0
    assert result.duplicate_epochs == 0 and result.unrecorded_completions == 0
    assert result.survivor_exit_codes and all(c == 0 for c in result.survivor_exit_codes)
    assert result.executions >= size.jobs and result.claims >= result.executions
    assert result.ok
