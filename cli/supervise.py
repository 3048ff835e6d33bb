"""Running workers: ``venturi worker`` starts one, ``venturi drain`` stops them."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import structlog
import typer

import venturi

from . import loader, logs, output, params
from .admin import AppOption
from .session import USAGE, DsnOption, JsonOption, PrefixOption, fail, run_async, session


def worker(
    ctx: typer.Context,
    app: AppOption,
    kinds: Annotated[str | None, typer.Option(
        help="Comma-separated subset of the module's kinds (default: all of them).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=10_000,
                                             help="Jobs run at once.")] = 10,
    name: Annotated[str | None, typer.Option(
        help="Worker name (default HOST:PID). A fixed name lets a restarted worker take "
             "back its own claims at once.")] = None,
    grace: Annotated[str, typer.Option(help="How long a drain waits for running jobs.")] = "30s",
    retention: Annotated[str | None, typer.Option(
        help="Delete finished jobs after an age, e.g. completed=1d,dead=7d.")] = None,
    listen_dsn: Annotated[str | None, typer.Option(
        help="DSN for LISTEN when --dsn goes through a transaction-mode pooler.")] = None,
    log_format: Annotated[str | None, typer.Option(
        help="json or console (default: console on a terminal, json otherwise).")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    dsn: DsnOption = None, prefix: PrefixOption = None,
) -> None:
    """Run a worker for the tasks of --app until drained (SIGTERM, `venturi drain`)."""
    s = session(ctx, dsn, prefix)
    wanted = params.kinds(kinds)
    drain_grace = params.duration(grace, "--grace")
    keep = params.retention(retention)
    if log_format not in (None, "json", "console"):
        fail(f"--log-format: {log_format!r} is not json or console", code=USAGE)
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        fail(f"--log-level: {log_level!r} is not debug, info, warning or error", code=USAGE)
    target = s.require_dsn()
    tasks = loader.app_tasks(app)
    unknown = [k for k in wanted or [] if k not in tasks]
    if unknown:
        fail(f"--kinds: unknown kind{'s' if len(unknown) > 1 else ''} "
             f"{', '.join(map(repr, unknown))}; {app} defines: {', '.join(tasks)}")

    logs.configure(logs.choose(log_format), log_level)

    async def go() -> int:
        async with venturi.Queue.connect(target, prefix=s.prefix, listen_dsn=listen_dsn) as q:
            w = venturi.Worker(
                q, tasks=list(tasks.values()), concurrency=concurrency, kinds=wanted,
                name=name, grace=drain_grace, handle_signals=True, retention=keep,
                listen_dsn=listen_dsn,
            )
            await w.run()
            code: int = w.exit_code
            return code

    try:
        code = run_async(go, dsn=target)
    finally:
        structlog.reset_defaults()
    raise typer.Exit(code)


def drain(
    ctx: typer.Context,
    worker_name: Annotated[str | None, typer.Option(
        "--worker", help="Drain only the worker with this name.")] = None,
    all_workers: Annotated[bool, typer.Option("--all", help="Drain every worker.")] = False,
    grace: Annotated[str | None, typer.Option(
        help="Override the workers' own grace period (e.g. 30s).")] = None,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Ask running workers to stop claiming, finish (or release) their jobs, and exit."""
    s = session(ctx, dsn, prefix, json)
    if (worker_name is None) == (not all_workers):
        fail("give --worker NAME or --all (one of the two)", code=USAGE)
    wait: timedelta | None = params.optional_duration(grace, "--grace")
    message: dict[str, Any] = {
        "op": "drain",
        "worker": worker_name,
        "grace": None if wait is None else wait.total_seconds(),
    }

    async def go(queue: venturi.Queue) -> list[venturi.WorkerInfo]:
        live = await queue.workers()
        if worker_name is not None and worker_name not in {w.name for w in live}:
            names = ", ".join(sorted(w.name for w in live)) or "none"
            fail(f"--worker: no worker named {worker_name!r} in queue {s.prefix} "
                 f"(registered: {names})")
        await queue.store.notify_control(message)
        return [w for w in live if worker_name is None or w.name == worker_name]

    targets = s.run(go)
    if s.json:
        output.emit_json({"sent": message, "workers": [w.name for w in targets]})
        return
    if worker_name is not None:
        typer.echo(f"asked worker {worker_name} to drain")
    else:
        typer.echo(f"asked all workers to drain ({len(targets)} registered)")


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(drain)
