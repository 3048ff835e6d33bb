"""The results file: the machine, the versions, every figure and its ratio to raw."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

import asyncpg

import venturi

from .harness import SCENARIOS, Figure, rss_summary


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _git_commit() -> str:
    here = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=5, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


async def environment(dsn: str, command: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        server = await conn.fetchval("SHOW server_version")
        settings = {
            name: await conn.fetchval(f"SHOW {name}")
            for name in ("shared_buffers", "synchronous_commit", "fsync", "wal_level")
        }
    finally:
        await conn.close()
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "commit": _git_commit(),
        "nproc": os.cpu_count(),
        "memory": _memory(),
        "cpu": _cpu_model(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "postgresql": server,
        "postgresql_settings": settings,
        "asyncpg": asyncpg.__version__,
        "venturi": venturi.__version__,
    }


def stamp(env: dict[str, Any], size: str) -> dict[str, str]:
    """When and on what a scenario runs: its section's line in the results file."""
    return {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": env["commit"], "size": size, "command": env["command"],
            "load_before": load_average()}


def kept_from(json_path: Path, rerun: set[str]) -> tuple[list[Figure], dict[str, dict[str, str]]]:
    """The figures (and their runs' stamps) of the scenarios not run again, read from a
    results file written earlier; a file from before per-scenario stamps gets its run's."""
    try:
        doc = json.loads(json_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"--merge: no results file at {json_path} to merge into") from None
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--merge: cannot read {json_path}: {exc}") from None
    figures = [Figure.from_dict(row) for row in doc["figures"] if row["scenario"] not in rerun
               and row["scenario"] in SCENARIOS]
    env = doc["environment"]
    whole_run = {"date": env["date"], "commit": env["commit"], "command": env["command"],
                 "size": "?", "load_before": env.get("load_before", "?"),
                 "load_after": env.get("load_after", "?")}
    runs = doc.get("runs", {})
    return figures, {f.scenario: runs.get(f.scenario, whole_run) for f in figures}


def in_scenario_order(figures: list[Figure]) -> list[Figure]:
    """Figures grouped by scenario in the order the scenarios are registered."""
    order = {name: i for i, name in enumerate(SCENARIOS)}
    return sorted(figures, key=lambda f: order[f.scenario])  # stable within a scenario


def ratio(fig: Figure, ref: Figure) -> float:
    """The median over runs of the run's ratio: both were measured in the same
    slices of the same run, so the run's load cancels out of each ratio.

    Latencies compare p99 (lower is better: 1.2 means 20 % slower than the
    reference); memory compares the peak RSS."""
    if fig.unit == "ms":
        return fig.percentile(99) / ref.percentile(99)
    if fig.unit == "MB":
        return max(fig.samples) / max(ref.samples)
    if len(fig.seconds) == len(ref.seconds):
        return statistics.median(a / b for a, b in zip(fig.rates, ref.rates, strict=True))
    return fig.rate / ref.rate


def _ratios(fig: Figure, by_name: dict[str, Figure]) -> str:
    parts = []
    for ref in fig.references:
        other = by_name.get(ref)
        if other is None:
            continue
        if fig.unit == "ms":
            parts.append(f"p50 {fig.percentile(50) / other.percentile(50):.2f}×, "
                         f"p99 {ratio(fig, other):.2f}× {ref}")
        elif fig.unit == "MB":
            parts.append(f"peak {ratio(fig, other):.2f}× {ref}")
        else:
            parts.append(f"{ratio(fig, other):.0%} of {ref}")
    return "; ".join(parts) if parts else "—" if not fig.raw else "(reference)"


def _label(fig: Figure) -> str:
    label = f"{fig.name} *(raw)*" if fig.raw else f"**{fig.name}**"
    return label + (f" — {fig.note}" if fig.note else "")


def _table(figs: list[Figure], by_name: dict[str, Figure]) -> list[str]:
    unit = figs[0].unit
    if unit == "ms":
        lines = ["| figure | samples | p50 ms | p90 ms | p99 ms | max ms | vs reference |",
                 "|---|---:|---:|---:|---:|---:|---|"]
        for f in figs:
            lines.append(f"| {_label(f)} | {f.jobs:,} | {f.percentile(50):.2f} | "
                         f"{f.percentile(90):.2f} | {f.percentile(99):.2f} | "
                         f"{max(f.samples):.2f} | {_ratios(f, by_name)} |")
        return lines
    if unit == "MB":
        lines = ["| figure | jobs | jobs/s | RSS start MB | warm | peak | end | end vs warm "
                 "| vs reference |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for f in figs:
            r = rss_summary(f.samples)
            lines.append(f"| {_label(f)} | {f.jobs:,} | {f.rate:,.0f} | {r['start']:.1f} | "
                         f"{r['warm']:.1f} | {r['peak']:.1f} | {r['end']:.1f} | "
                         f"{r['drift']:+.1%} | {_ratios(f, by_name)} |")
        return lines
    lines = ["| figure | jobs per run | jobs/s (median) | runs: min–max jobs/s "
             "| vs reference (median of per-run ratios) |", "|---|---:|---:|---|---|"]
    for f in figs:
        lines.append(f"| {_label(f)} | {f.jobs:,} | {f.rate:,.0f} | {_spread(f)} | "
                     f"{_ratios(f, by_name)} |")
    return lines


def _spread(fig: Figure) -> str:
    rates = fig.rates
    if len(rates) < 2:
        return "1 run"
    return f"{min(rates):,.0f}–{max(rates):,.0f} (±{(max(rates) - min(rates)) / 2 / fig.rate:.0%})"


def _stamp_line(run: dict[str, str] | None) -> list[str]:
    if run is None:
        return []
    size = f", size {run['size']}" if run.get("size", "?") != "?" else ""
    return [f"*Measured {run['date']} at `{run['commit']}`{size}; load average "
            f"{run['load_before']} before, {run.get('load_after', '?')} after.*", ""]


def markdown(env: dict[str, Any], figures: list[Figure], notes: list[str],
             extra: str = "", runs: dict[str, dict[str, str]] | None = None) -> str:
    runs = runs or {}
    lines = [
        "# venturi benchmarks",
        "",
        "Produced by `python -m benchmarks run`; do not edit by hand (rerun it). Every venturi",
        "figure sits beside raw asyncpg references measured in the same run on the same",
        "database: absolute numbers move with the machine's load, the ratios are what count.",
        "A run with `--only X --merge` measures X again and keeps the other sections (each",
        "section says when, at which commit and under what load it was measured).",
        "",
        "## Machine and versions",
        "",
        "| | |",
        "|---|---|",
        f"| date | {env['date']} |",
        f"| command | `{env['command']}` |",
        f"| commit | `{env['commit']}` |",
        f"| CPU | {env['cpu']}, nproc = {env['nproc']} |",
        f"| memory | {env['memory']} |",
        f"| OS | {env['os']} |",
        f"| Python | {env['python']} |",
        f"| PostgreSQL | {env['postgresql']} (loopback TCP; "
        + ", ".join(f"{k}={v}" for k, v in env["postgresql_settings"].items()) + ") |",
        f"| asyncpg | {env['asyncpg']} |",
        f"| venturi | {env['venturi']} |",
        f"| load average (1/5/15 min) | before {env.get('load_before', '?')}, "
        f"after {env.get('load_after', '?')} |",
    ]
    earlier = sorted({r["date"] for r in runs.values() if r.get("command") != env["command"]})
    if earlier:
        lines.append(f"| merged | the rows above are the last run's; sections measured by other "
                     f"runs ({earlier[0]} to {earlier[-1]}) say when and at which commit |")
    lines.append("")
    by_scenario: dict[str, list[Figure]] = {}
    for fig in figures:
        by_scenario.setdefault(fig.scenario, []).append(fig)
    for name, figs in by_scenario.items():
        sc = SCENARIOS[name]
        by_name = {f.name: f for f in figs}
        lines += [f"## `{name}`: {sc.title}", "", *_stamp_line(runs.get(name)),
                  sc.description, ""]
        for unit in dict.fromkeys(f.unit for f in figs):
            lines += [*_table([f for f in figs if f.unit == unit], by_name), ""]
    if notes or extra:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    if extra:
        lines += [extra.strip(), ""]
    return "\n".join(lines)


def write(out: Path, json_out: Path | None, env: dict[str, Any], figures: list[Figure],
          notes: list[str], extra: str = "",
          runs: dict[str, dict[str, str]] | None = None) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(env, figures, notes, extra, runs), encoding="utf-8")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        by_key = {(f.scenario, f.name): f for f in figures}
        rows = []
        for f in figures:
            row = f.as_dict()
            row["ratios"] = {r: ratio(f, by_key[(f.scenario, r)]) for r in f.references
                             if (f.scenario, r) in by_key}
            rows.append(row)
        doc = {"environment": env, "notes": notes, "notes_file": extra, "runs": runs or {},
               "figures": rows}
        json_out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
