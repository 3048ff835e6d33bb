"""``python -m benchmarks run|explain``: see ``--help``."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from pathlib import Path

from . import report
from .harness import DEFAULT_DSN, SCENARIOS, SIZES, Bench, Figure


def _dsn(arg: str | None) -> str:
    return arg or os.environ.get("VENTURI_DSN") or os.environ.get("VENTURI_TEST_DSN") or DEFAULT_DSN


async def run(args: argparse.Namespace) -> list[Figure]:
    from . import scenarios  # noqa: F401  (registers every scenario)

    names = args.only or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    kept, kept_runs = report.kept_from(Path(args.json), set(names)) if args.merge else ([], {})
    dsn = _dsn(args.dsn)
    env = await report.environment(dsn, args.command_line)
    env["load_before"] = report.load_average()
    bench = Bench(dsn=dsn, size=SIZES[args.size])
    runs: dict[str, dict[str, str]] = {}
    for name in names:
        bench.scenario = name
        print(f"== {name} ({args.size})", flush=True)
        before = len(bench.figures)
        runs[name] = report.stamp(env, args.size)
        await SCENARIOS[name].fn(bench)
        runs[name]["load_after"] = report.load_average()
        for fig in bench.figures[before:]:
            if fig.unit == "ms":
                shown = f"p50 {fig.percentile(50):.2f} ms, p99 {fig.percentile(99):.2f} ms"
            elif fig.unit == "MB":
                shown = f"RSS {fig.samples[0]:.1f} → peak {max(fig.samples):.1f} → " \
                        f"{fig.samples[-1]:.1f} MB"
            else:
                shown = f"{fig.rate:>10,.0f} jobs/s"
            print(f"   {fig.name:<60} {shown}", flush=True)
    env["load_after"] = report.load_average()
    notes = [
        "Noise: the machine is shared; each section gives the load average before and after "
        f"its scenario, on {env['nproc']} CPUs. Contenders take turns in slices within each "
        "run, so load bursts hit them alike; the min–max column shows what remains between "
        "runs.",
        *(args.note or []),
    ]
    figures = report.in_scenario_order(kept + bench.figures)
    report.write(Path(args.out), Path(args.json) if args.json else None, env, figures,
                 notes, args.notes_text, kept_runs | runs)
    print(f"wrote {args.out}" + (f" and {args.json}" if args.json else ""))
    return bench.figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run the scenarios and write the results file")
    p_run.add_argument("--size", choices=sorted(SIZES), default="quick")
    p_run.add_argument("--only", action="append", metavar="SCENARIO",
                       help="run only this scenario (repeatable)")
    p_run.add_argument("--out", default="docs/benchmarks.md")
    p_run.add_argument("--json", default="benchmarks/results.json",
                       help="JSON copy of the results ('' to skip)")
    p_run.add_argument("--merge", action="store_true",
                       help="keep the other scenarios' figures from the --json file and "
                            "replace only those run now (each section says when it ran)")
    p_run.add_argument("--note", action="append", help="a line for the Notes section")
    p_run.add_argument("--notes-file", help="a markdown file appended to the Notes section")
    p_run.add_argument("--dsn", help="default: $VENTURI_DSN, $VENTURI_TEST_DSN, local test db")
    p_explain = sub.add_parser("explain", help="EXPLAIN the hot statements on a large table")
    p_explain.add_argument("--out", default="docs/explain-plans.md")
    p_explain.add_argument("--finished", type=int, default=1_000_000)
    p_explain.add_argument("--future", type=int, default=100_000)
    p_explain.add_argument("--dsn")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    args.command_line = "python -m benchmarks " + shlex.join(argv)
    if args.command == "run":
        # Read before running, so that a wrong path fails in a second, not after the run.
        args.notes_text = Path(args.notes_file).read_text(encoding="utf-8") \
            if args.notes_file else ""
        if args.merge and not args.json:
            parser.error("--merge reads the figures to keep from --json: give its path")
        asyncio.run(run(args))
    else:
        from . import explain

        asyncio.run(explain.main(_dsn(args.dsn), Path(args.out), args.finished, args.future,
                                 args.command_line))


if __name__ == "__main__":
    main()
