"""The benchmark suite's quick size runs every scenario and writes a complete results file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.harness import SCENARIOS

WORKER_SCENARIOS = {"drain", "pickup", "backlog", "scaleout", "memory"}


def test_quick_size_writes_every_scenario(pg_dsn: str, tmp_path: Path) -> None:
    out, js = tmp_path / "bench.md", tmp_path / "bench.json"
    main(["run", "--size", "quick", "--out", str(out), "--json", str(js), "--dsn", pg_dsn])

    doc = json.loads(js.read_text())
    figures = doc["figures"]
    assert set(SCENARIOS) >= {"enqueue", "enqueue_many"} | WORKER_SCENARIOS
    assert {f["scenario"] for f in figures} == set(SCENARIOS)
    for name in SCENARIOS:
        mine = [f for f in figures if f["scenario"] == name]
        names = {f["name"] for f in mine}
        raw = {f["name"] for f in mine if f["raw"]}
        measured = [f for f in mine if not f["raw"]]
        assert raw and measured, f"{name} needs a raw reference and a venturi figure"
        for f in measured:
            # Every venturi figure is compared with a raw one; some also with another
            # venturi figure of the scenario (backlog vs empty, two processes vs one).
            assert set(f["references"]) & raw and set(f["references"]) <= names
            assert set(f["ratios"]) == set(f["references"])
            assert all(r > 0 for r in f["ratios"].values())
    assert all(f["jobs"] > 0 and f["jobs_per_s"] > 0 for f in figures)
    assert doc["environment"]["postgresql"] and doc["environment"]["nproc"]

    by_unit = {u: [f for f in figures if f["unit"] == u] for u in ("jobs/s", "ms", "MB")}
    for f in by_unit["ms"]:  # pickup latencies: one sample per job, plausible values
        assert len(f["samples"]) == f["jobs"] >= 50
        assert 0 < f["p50_ms"] <= f["p99_ms"] <= f["max_ms"] < 10_000
    assert {f["scenario"] for f in by_unit["ms"]} == {"pickup", "backlog", "result", "peers"}
    for f in by_unit["MB"]:  # RSS samples of a child process
        rss = f["rss_mb"]
        assert 5 < rss["start"] <= rss["peak"] < 2_000 and rss["end"] <= rss["peak"]
    assert {f["scenario"] for f in by_unit["MB"]} == {"memory"}
    drain = {f["name"] for f in figures if f["scenario"] == "drain"}
    assert {"Worker concurrency=10", "Worker concurrency=50"} <= drain
    backlog = [f for f in figures if f["scenario"] == "backlog" and "completed" in f["name"]
               and not f["raw"] and f["unit"] == "jobs/s"]
    assert backlog and "index scan on jobs_claim" in backlog[0]["note"]

    text = out.read_text()
    for name in SCENARIOS:
        assert f"## `{name}`" in text
    for f in figures:
        assert f["name"] in text
    assert "% of raw" in text and "asyncpg" in text and "--size quick" in text
    assert "p99" in text and "RSS" in text


def test_a_merged_run_replaces_only_the_scenarios_it_ran(pg_dsn: str, tmp_path: Path) -> None:
    out, js = tmp_path / "bench.md", tmp_path / "bench.json"
    main(["run", "--size", "quick", "--only", "enqueue", "--only", "pickup", "--out", str(out),
          "--json", str(js), "--dsn", pg_dsn])
    first = json.loads(js.read_text())
    kept = [f for f in first["figures"] if f["scenario"] == "pickup"]

    main(["run", "--size", "quick", "--only", "enqueue", "--merge", "--out", str(out),
          "--json", str(js), "--dsn", pg_dsn])
    doc = json.loads(js.read_text())
    # pickup's figures come through untouched, with the stamp of the run that measured them
    assert [f for f in doc["figures"] if f["scenario"] == "pickup"] == kept
    assert doc["runs"]["pickup"] == first["runs"]["pickup"]
    enqueue = [f for f in doc["figures"] if f["scenario"] == "enqueue"]
    assert enqueue and enqueue != [f for f in first["figures"] if f["scenario"] == "enqueue"]
    assert doc["runs"]["enqueue"]["commit"] and doc["runs"]["enqueue"]["load_after"]
    # registration order: enqueue's section before pickup's, each stamped
    text = out.read_text()
    assert text.index("## `enqueue`") < text.index("## `pickup`")
    assert text.count("*Measured ") == 2
    for f in doc["figures"]:
        assert f["name"] in text


def test_merge_without_a_results_file_says_so(pg_dsn: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no results file at .*missing\.json"):
        main(["run", "--size", "quick", "--only", "enqueue", "--merge", "--out",
              str(tmp_path / "b.md"), "--json", str(tmp_path / "missing.json"), "--dsn", pg_dsn])
