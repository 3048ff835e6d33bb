"""The steady-state benchmark's figures, per quarter of the run, and its verdict
against the targets of the tables-stay-small work: jobs + journal size in the last
quarter at most 1.2x the second, pickup lag p99 under 50 ms, nothing left behind,
worker RSS flat."""

from __future__ import annotations

import os
import re
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .steady import Sample, SteadyResult

SIZE_GROWTH = 1.2
LAG_P99_MS = 50.0
RSS_GROWTH = 1.10


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


@dataclass
class Quarter:
    n: int
    samples: list[Sample]
    lags: list[float]
    seconds: float

    def total_mib(self, s: Sample) -> float:
        return sum(s.size_kib.values()) / 1024

    @property
    def size_mean(self) -> float:
        return statistics.fmean(self.total_mib(s) for s in self.samples)

    @property
    def size_max(self) -> float:
        return max(self.total_mib(s) for s in self.samples)

    def peak(self, attr: str, key: str | None = None) -> int:
        return max((getattr(s, attr)[key] if key else getattr(s, attr)) for s in self.samples)

    def delta(self, attr: str, before: Sample | None) -> int:
        first = before or self.samples[0]
        return sum(getattr(self.samples[-1], attr).values()) - sum(getattr(first, attr).values())


def quarters(r: SteadyResult) -> list[Quarter]:
    span = r.stopped_at or r.samples[-1].t
    out = []
    for q in range(4):
        lo, hi = span * q / 4, span * (q + 1) / 4
        samples = [s for s in r.samples if lo <= s.t < hi] or [r.samples[-1]]
        lags = [ms for at, ms in r.lags if lo <= at < hi]
        out.append(Quarter(q + 1, samples, lags, hi - lo))
    return out


@dataclass
class Verdict:
    size_ratio: float
    lag_p99: float
    worst_quarter_p99: float
    left_behind: int
    unhandled: int
    rss_ratio: float

    @property
    def ok(self) -> bool:
        return (self.size_ratio <= SIZE_GROWTH and self.worst_quarter_p99 < LAG_P99_MS
                and self.left_behind == 0 and self.unhandled == 0
                and self.rss_ratio <= RSS_GROWTH)


def verdict(r: SteadyResult) -> Verdict:
    qs = quarters(r)
    rss_first = [k for k in qs[0].samples[-1].rss_kib if k]
    rss_last = [k for k in qs[3].samples[-1].rss_kib if k]
    rss_ratio = max((b / a for a, b in zip(rss_first, rss_last, strict=False)), default=0.0)
    handled = len(r.lags)
    return Verdict(
        size_ratio=qs[3].size_mean / max(qs[1].size_mean, 1e-9),
        lag_p99=percentile([ms for _, ms in r.lags], 99),
        worst_quarter_p99=max(percentile(q.lags, 99) for q in qs),
        left_behind=r.left_pending + r.left_claimed,
        unhandled=max(0, r.sent - handled),
        rss_ratio=rss_ratio)


_AUTOVACUUM = re.compile(
    r'automatic (vacuum|analyze) of table "[^"]*?_(jobs|journal)".*?elapsed: ([\d.]+) s', re.S)


def autovacuum_summary(server_log: str) -> str:
    """Autovacuum's passes over the two tables, from a server log written with
    ``log_autovacuum_min_duration = 0``."""
    took: dict[tuple[str, str], list[float]] = {}
    for what, table, seconds in _AUTOVACUUM.findall(server_log):
        took.setdefault((what, table), []).append(float(seconds))
    if not took:
        return "Autovacuum (server log): no passes over jobs or journal."
    return "Autovacuum (server log): " + "; ".join(
        f"{what} {table} {len(t)}x, {statistics.fmean(t):.2f} s mean, {max(t):.2f} s longest"
        for (what, table), t in sorted(took.items())) + "."


def _mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


def _waits(samples: list[Sample]) -> str:
    total: Counter[str] = Counter()
    for s in samples:
        total.update(s.waits)
    n = max(sum(total.values()), 1)
    return ", ".join(f"{w} {c * 100 / n:.0f} %" for w, c in total.most_common(4))


def _done(s: Sample) -> int:
    return s.sent - s.pending - s.claimed


def _statement_table(qs: list[Quarter]) -> list[str]:
    if not qs[0].samples[0].statements:
        return []
    out = ["", "Statements per quarter (pg_stat_statements; ms, shared buffers and rows per call):",
           "", "| quarter | claim calls/s | claim ms | claim buffers | claim rows |"
           " settle ms | settle buffers | enqueue ms | retention calls | retention ms |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    before = None
    for q in qs:
        a = (before or q.samples[0]).statements or {}
        b = q.samples[-1].statements or {}
        dt = max(q.samples[-1].t - (before or q.samples[0]).t, 1e-9)

        def per(what: str, a: dict[str, Any] = a, b: dict[str, Any] = b) -> tuple[float, ...]:
            c0, ms0, bl0, r0 = a.get(what, (0, 0.0, 0, 0))
            c1, ms1, bl1, r1 = b.get(what, (0, 0.0, 0, 0))
            calls = max(c1 - c0, 1)
            return (c1 - c0, (ms1 - ms0) / calls, (bl1 - bl0) / calls, (r1 - r0) / calls)

        claim, settle, enq, ret = per("claim"), per("settle"), per("enqueue"), per("retention")
        out.append(f"| Q{q.n} | {claim[0] / dt:.0f} | {claim[1]:.2f} | {claim[2]:.0f} |"
                   f" {claim[3]:.1f} | {settle[1]:.2f} | {settle[2]:.0f} | {enq[1]:.2f} |"
                   f" {ret[0]:.0f} | {ret[1]:.0f} |")
        before = q.samples[-1]
    return out


def _timeline(r: SteadyResult, rows: int = 16) -> list[str]:
    """The claim's cost over the run: the claim statement per call between two rows
    (pg_stat_statements) and one tier's scan (EXPLAIN), when sampled."""
    if not (r.samples[0].statements or r.samples[0].explain):
        return []
    out = ["", "The claim over time (statement: ms and buffers per call since the row before;"
           " tier scan: one EXPLAIN ANALYZE of the normal tier's SELECT, LIMIT 10):", "",
           "| t s | claims/s | claim ms | claim buffers | tier scan ms | tier scan buffers |"
           " dead tuples jobs | pending | jobs+journal MiB |",
           "|---|---|---|---|---|---|---|---|---|"]
    step = max(1, len(r.samples) // rows)
    picked = r.samples[::step]
    for a, b in zip([picked[0], *picked[:-1]], picked, strict=True):
        c0, ms0, bl0, _ = (a.statements or {}).get("claim", (0, 0.0, 0, 0))
        c1, ms1, bl1, _ = (b.statements or {}).get("claim", (0, 0.0, 0, 0))
        n = max(c1 - c0, 1)
        e = b.explain or {}
        scan = f"{e['ms']:.2f} | {e['buffers']}" if e else "- | -"
        out.append(f"| {b.t:.0f} | {(c1 - c0) / max(b.t - a.t, 1e-9):.0f} |"
                   f" {(ms1 - ms0) / n:.2f} | {(bl1 - bl0) / n:.0f} | {scan} |"
                   f" {b.dead['jobs']} | {b.pending} | {sum(b.size_kib.values()) / 1024:.0f} |")
    return out


def render(r: SteadyResult, command: str, *, title: str = "", note: str = "") -> str:
    o = r.options
    v = verdict(r)
    qs = quarters(r)
    drained = "NOT empty" if r.empty_after is None else f"empty after {r.empty_after:.1f} s"
    done = "the workers' own (venturi worker --maintenance on)" if o["maintenance"] else (
        "off (--maintenance off)")
    lines = [
        f"## {title or 'Steady state'}", "",
        f"Command: `{command}`", "",
        "```",
        f"producer                  {o['rate']:.0f} jobs/s for {o['seconds']:.0f} s"
        f" ({r.sent} sent)",
        f"workers                   {o['workers']} x concurrency {o['concurrency']},"
        f" --retention {o['retention']}",
        f"maintenance               {done}",
        f"held snapshot             {o['hold_snapshot'] or 'none'}; burst {o['burst'] or 'none'};"
        f" ANALYZE at {o['analyze_at'] or 'never'}",
        f"load average              {r.load[0]} at start, {r.load[1]} at end (2 cores)",
        f"size Q4 / Q2              {v.size_ratio:.2f} (target <= {SIZE_GROWTH})",
        f"pickup lag p99            {v.lag_p99:.1f} ms overall, worst quarter"
        f" {v.worst_quarter_p99:.1f} ms (target < {LAG_P99_MS:.0f})",
        f"after the producer stopped {drained};"
        f" left pending {r.left_pending}, claimed {r.left_claimed};"
        f" handled {len(r.lags)} of {r.sent}",
        f"worker RSS Q4 / Q1        {v.rss_ratio:.2f}",
        f"worker exit codes         {r.exit_codes}",
        f"verdict                   {'all targets met' if v.ok else 'TARGETS MISSED'}",
        "server                    " + ", ".join(f"{k}={x}" for k, x in r.settings.items()),
        "table options             " + "; ".join(
            f"{k}: {x or '(none)'}" for k, x in o["table options"].items()),
        "```", "",
        "| quarter | enqueued / done jobs/s | jobs+journal MiB mean / max | claim index MiB |"
        " dead tuples jobs / journal (max) | vacuums auto / manual | pickup lag ms p50 / p99 /"
        " max | pending max | worker RSS MiB | load 1 min | oldest xact s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    before = None
    for q in qs:
        first, last = before or q.samples[0], q.samples[-1]
        dt = max(last.t - first.t, 1e-9)
        rate = (last.sent - first.sent) / dt
        done = (_done(last) - _done(first)) / dt
        sent_in = last.sent - first.sent
        lag = (f"{percentile(q.lags, 50):.1f} / {percentile(q.lags, 99):.1f} /"
               f" {max(q.lags):.0f}" if q.lags else "-")
        if len(q.lags) < 0.98 * sent_in:
            lag += f" (only {len(q.lags)} of ~{sent_in} ran)"
        horizons = [s.horizon_age for s in q.samples if s.horizon_age is not None]
        lines.append(
            f"| Q{q.n} | {rate:.0f} / {done:.0f} | {q.size_mean:.1f} / {q.size_max:.1f} |"
            f" {last.claim_index_kib / 1024:.1f} |"
            f" {q.peak('dead', 'jobs')} / {q.peak('dead', 'journal')} |"
            f" {q.delta('autovacuums', before)} / {q.delta('vacuums', before)} |"
            f" {lag} |"
            f" {q.peak('pending')} | " + " / ".join(_mib(k) for k in last.rss_kib) +
            f" | {statistics.fmean(s.load1 for s in q.samples):.2f} |"
            f" {max([0.0, *horizons]):.1f} |")
        before = last
    lines += _statement_table(qs)
    held = [(s.t, s.horizon_age, s.horizon_who) for s in r.samples if s.horizon_who]
    if held:
        t, age, who = max(held, key=lambda h: h[1] or 0.0)
        lines += ["", f"Oldest snapshot over 5 s: {len(held)} samples; the oldest, at {t:.0f} s:"
                      f" {age:.0f} s, {who}."]
    upd, hot = r.samples[-1].updates
    lines += ["", f"Jobs-table updates: {upd}, of which HOT: {hot}."
                  f" Wait events of active backends (all samples): {_waits(r.samples)}."]
    vacuumed = [m for m in r.maintenance if not m["skipped"]]
    if vacuumed:
        took = [m["seconds"] for m in vacuumed]
        by_table = Counter(m["table"].rsplit("_", 1)[-1] for m in vacuumed)
        tables = ", ".join(f"{t} {n}" for t, n in by_table.items())
        lines.append(
            f"Maintenance VACUUMs: {len(took)} ({tables}),"
            f" {statistics.fmean(took):.2f} s mean, {max(took):.2f} s longest,"
            f" {sum(took):.0f} s in all; skipped: {len(r.maintenance) - len(vacuumed)}"
            f" ({', '.join(sorted({m['skipped'] for m in r.maintenance if m['skipped']}))}).")
    lines += _timeline(r)
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"
