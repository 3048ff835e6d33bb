"""The benchmark suite's quick size runs every scenario and writes a complete results file."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.__main__ import main
from benchmarks.harness import SCENARIOS


def test_quick_size_writes_every_scenario(pg_dsn: str, tmp_path: Path) -> None:
    out, js = tmp_path / "bench.md", tmp_path / "bench.json"
    main(["run", "--size", "quick", "--out", str(out), "--json", str(js), "--dsn", pg_dsn])

    doc = json.loads(js.read_text())
    figures = doc["figures"]
    assert set(SCENARIOS) >= {"enqueue", "enqueue_many"}
    assert {f["scenario"] for f in figures} == set(SCENARIOS)
    for name in SCENARIOS:
        mine = [f for f in figures if f["scenario"] == name]
        raw = {f["name"] for f in mine if f["raw"]}
        measured = [f for f in mine if not f["raw"]]
        assert raw and measured, f"{name} needs a raw reference and a venturi figure"
        for f in measured:
            assert f["references"] and set(f["references"]) <= raw
            assert set(f["ratios"]) == set(f["references"])
            assert all(r > 0 for r in f["ratios"].values())
    assert all(f["jobs"] > 0 and f["jobs_per_s"] > 0 for f in figures)
    assert doc["environment"]["postgresql"] and doc["environment"]["nproc"]

    text = out.read_text()
    for name in SCENARIOS:
        assert f"## `{name}`" in text
    for f in figures:
        assert f["name"] in text
    assert "% of raw" in text and "asyncpg" in text and "--size quick" in text
