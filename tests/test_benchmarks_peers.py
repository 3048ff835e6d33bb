"""The ``peers`` benchmark scenario: PgQueuer and oban beside venturi, in the same run.

The peers' venvs are never built here (CI must not download them): the scenario test runs
where they exist (``python -m benchmarks run --size full --only peers`` builds them, or
``VENTURI_PEERS_BUILD=1`` at any size) and is skipped otherwise.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg
import pytest

from benchmarks import peerenv
from benchmarks.__main__ import main


def test_a_peer_without_its_venv_is_skipped_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VENTURI_PEERS_VENV", str(tmp_path / "none"))
    said = asyncio.run(peerenv.prepare(peerenv.PGQUEUER, build=False))
    assert isinstance(said, str) and "\n" not in said
    assert said.startswith("PgQueuer skipped: no venv") and str(tmp_path / "none") in said
    assert not (tmp_path / "none").exists()  # nothing was built


async def _peer_databases(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE 'venturi\\_peers\\_%'")
        return {r[0] for r in rows}
    finally:
        await conn.close()


@pytest.mark.may_skip_in_ci("the peers' venvs are built only by a full benchmark run; CI "
                             "downloads nothing for them")
def test_quick_peers_run_compares_venturi_with_each_peer(
        pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VENTURI_PEERS_BUILD", raising=False)
    found = [asyncio.run(peerenv.prepare(p, build=False)) for p in peerenv.PEERS]
    ready = [r for r in found if isinstance(r, peerenv.Ready)]
    if not ready:
        pytest.skip("; ".join(str(r) for r in found))
    before = asyncio.run(_peer_databases(pg_dsn))
    out, js = tmp_path / "peers.md", tmp_path / "peers.json"
    main(["run", "--size", "quick", "--only", "peers", "--out", str(out), "--json", str(js),
          "--dsn", pg_dsn])

    figures = {f["name"]: f for f in json.loads(js.read_text())["figures"]}
    raw = "raw claim 100 + done 100 per statement"
    assert figures[raw]["raw"] and figures["raw single-row INSERT"]["raw"]
    for c in (10, 50):
        mine = figures[f"Worker concurrency={c}, own process"]
        for r in ready:
            peer = figures[f"{r.label} concurrency={c}, own process"]
            assert peer["jobs"] == mine["jobs"] == figures[raw]["jobs"] and peer["jobs_per_s"] > 0
            assert peer["references"] == [raw]
            # venturi's figure is compared with the peer's measured in the same runs
            assert mine["ratios"][peer["name"]] > 0
    for r in ready:
        if r.peer is peerenv.PGQUEUER:  # also with the largest batch it accepts
            tuned = f"{r.label} concurrency=50, batch_size=25, own process"
            assert figures[tuned]["jobs_per_s"] > 0
            assert figures["Worker concurrency=50, own process"]["ratios"][tuned] > 0
    pickup = figures["Worker pickup, own process"]
    for r in ready:
        peer = figures[f"{r.label} pickup, own process"]
        assert peer["unit"] == "ms" and len(peer["samples"]) == peer["jobs"] == pickup["jobs"]
        assert 0 < peer["p50_ms"] <= peer["p99_ms"] < 10_000
        assert pickup["ratios"][peer["name"]] == pytest.approx(pickup["p99_ms"] / peer["p99_ms"])
    enqueue = figures["Queue.enqueue"]
    for r in ready:
        assert enqueue["ratios"][f"{r.label} enqueue"] > 0
    text = out.read_text()
    assert all(r.label in text for r in ready)
    # the peers' databases were created for the run and dropped after it
    assert asyncio.run(_peer_databases(pg_dsn)) == before
