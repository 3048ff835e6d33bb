"""Running workers: ``venturi worker`` starts one, ``venturi drain`` stops them."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Annotated, Any

import typer

import venturi
import venturi.logs
from venturi.config import require_web

from . import django_project, loader, output, params
from .session import (
    USAGE,
    DsnOption,
    GlobalOptions,
    JsonOption,
    PrefixOption,
    fail,
    run_async,
    session,
)

WorkerAppOption = Annotated[str | None, typer.Option(
    "--app", envvar="VENTURI_APP", show_default=False,
    help="Module defining the tasks, e.g. myproject.tasks (env VENTURI_APP).")]
DjangoOption = Annotated[str | None, typer.Option(
    "--django", show_default=False,
    help="Django settings module, e.g. myproject.settings: run the project's Django "
         "tasks (its VenturiBackend's queues; DSN and prefix from its settings).")]


def worker(
    ctx: typer.Context,
    app: WorkerAppOption = None,
    django: DjangoOption = None,
    kinds: Annotated[str | None, typer.Option(
        help="Comma-separated subset of the module's kinds (default: all of them).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=10_000,
                                             help="Jobs run at once.")] = 10,
    prefetch: Annotated[str, typer.Option(
        help="Jobs claimed ahead of the free slots: auto (adapted to the job rate, at most "
             "about 20 ms of the slots' work, or a claim's round trip when longer, up to "
             "100 ms) or a number (0: only for free slots).")] = "auto",
    name: Annotated[str | None, typer.Option(
        help="Worker name (default HOST:PID). A fixed name lets a restarted worker take "
             "back its own claims at once.")] = None,
    grace: Annotated[str, typer.Option(help="How long a drain waits for running jobs.")] = "30s",
    retention: Annotated[str | None, typer.Option(
        help="Delete finished jobs after an age, e.g. completed=1d,dead=7d.")] = None,
    listen_dsn: Annotated[str | None, typer.Option(
        help="DSN for LISTEN when --dsn goes through a transaction-mode pooler.")] = None,
    maintenance: Annotated[str, typer.Option(
        help="on: vacuum the queue's tables where autovacuum is off or behind (one "
             "worker of the queue at a time); off: leave it to autovacuum.")] = "on",
    gc_threshold: Annotated[str, typer.Option(
        help="While running, hold the garbage collector's young threshold at least this "
             "high (CPython's is 700; docs/operations/sizing.md); off leaves it alone.")
    ] = "10000",
    http: Annotated[str | None, typer.Option(
        help="Serve /healthz, /readyz and /metrics on HOST:PORT (needs the web extra: "
             "pip install 'venturi[web]').")] = None,
    dashboard: Annotated[bool, typer.Option(
        "--dashboard", help="With --http: serve the dashboard there too.")] = False,
    read_only: Annotated[bool, typer.Option(
        "--read-only", help="With --dashboard: views only, no action routes.")] = False,
    token: Annotated[str | None, typer.Option(
        envvar="VENTURI_WEB_TOKEN", show_envvar=True, show_default=False,
        help="With --dashboard: operators sign in with this token to retry, cancel and "
             "drain (prefer the environment variable). Without one it only shows.")] = None,
    log_format: Annotated[str | None, typer.Option(
        help="json or console (default: console on a terminal, json otherwise).")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    dsn: DsnOption = None, prefix: PrefixOption = None,
) -> None:
    """Run a worker for the tasks of --app (and/or --django) until drained (SIGTERM,
    `venturi drain`)."""
    # First: from here on a SIGTERM or SIGINT drains, whatever the start is doing (the
    # application's import, connecting, the boot), instead of killing the process.
    with venturi.Worker.handling_signals():
        if app is None and django is None:
            fail("give --app MODULE (venturi tasks) or --django SETTINGS (Django tasks)",
                 code=USAGE)
        s = session(ctx, dsn, prefix)
        wanted = params.kinds(kinds)
        drain_grace = params.duration(grace, "--grace")
        keep = params.retention(retention)
        ahead = params.prefetch(prefetch)
        young = params.gc_threshold(gc_threshold)
        if maintenance not in ("on", "off"):
            fail(f"--maintenance: {maintenance!r} is not on or off", code=USAGE)
        if log_format not in (None, "json", "console"):
            fail(f"--log-format: {log_format!r} is not json or console", code=USAGE)
        if log_level.lower() not in ("debug", "info", "warning", "error"):
            fail(f"--log-level: {log_level!r} is not debug, info, warning or error", code=USAGE)
        if read_only and not dashboard:
            fail("--read-only applies to the dashboard: give --dashboard too", code=USAGE)
        if dashboard and http is None:
            fail("--dashboard is served on the --http address: give --http HOST:PORT too",
                 code=USAGE)
        auth = _dashboard_auth(token, dashboard and not read_only)
        tasks = loader.app_tasks(app) if app is not None else {}
        queue_prefix = s.prefix
        if django is not None:
            glob = ctx.obj if isinstance(ctx.obj, GlobalOptions) else GlobalOptions()
            project = django_project.load(django, prefix or glob.prefix)
            tasks.update((cls.__task__.kind, cls) for cls in project.tasks)
            queue_prefix = project.backend.prefix
            if not s.dsn:
                s = s.with_dsn(project.dsn)
        target = s.require_dsn()
        unknown = [k for k in wanted or [] if k not in tasks]
        if unknown:
            source = " and ".join(x for x in (app, django) if x)
            fail(f"--kinds: unknown kind{'s' if len(unknown) > 1 else ''} "
                 f"{', '.join(map(repr, unknown))}; {source} defines: {', '.join(tasks)}")

        try:
            config = venturi.WorkerConfig(
                concurrency=concurrency, kinds=None if wanted is None else tuple(wanted), name=name,
                prefetch=ahead, grace=drain_grace, retention=keep or {}, listen_dsn=listen_dsn,
                http=http, dashboard=dashboard, dashboard_read_only=read_only,
                handle_signals=True, maintenance=maintenance == "on",
                gc_threshold=young,
            )
        except venturi.ConfigError as exc:
            fail(str(exc), code=USAGE)
        if http is not None:
            try:
                require_web()
            except venturi.ConfigError as exc:
                fail(str(exc))
        fmt: venturi.logs.LogFormat = "json" if log_format == "json" else (
            "console" if log_format == "console" else "auto")
        venturi.logs.configure(fmt, log_level)

        async def go() -> int:
            async with contextlib.AsyncExitStack() as stack:
                q: venturi.Queue | None = None
                with venturi.Worker.cancelled_by_signal() as connecting:
                    q = await _connect(stack, target, queue_prefix, listen_dsn, s.pooler,
                                       config.max_backoff.total_seconds())
                if connecting.cancel_called or q is None:
                    venturi.logs.get_logger("venturi.cli").info(
                        "worker_not_started", reason="signalled before it connected")
                    return 0  # nothing was claimed
                lifespan = None if django is None else django_project.lifespan(
                    q, project.backend, config)
                w = venturi.Worker(q, list(tasks.values()), config=config, lifespan=lifespan,
                                   dashboard_auth=auth)
                await w.run()
                return w.exit_code or 0

        try:
            code = run_async(go, dsn=target)
        finally:
            venturi.logs.reset()  # CliRunner tests run many commands in one process
    raise typer.Exit(code)


def _dashboard_auth(token: str | None, acting: bool) -> Any:
    """The dashboard's TokenAuth, when it may act; None without a token."""
    if token is None or not acting:
        return None
    try:
        from venturi.web import TokenAuth
    except ImportError:
        return None  # the missing extra is named once --http is checked
    try:
        return TokenAuth(token)
    except ValueError as exc:
        fail(f"--token: {exc}", code=USAGE)


async def _connect(stack: contextlib.AsyncExitStack, dsn: str, prefix: str,
                   listen_dsn: str | None, pooler: bool, cap: float) -> venturi.Queue:
    """The worker's queue, once the database answers. A worker started while its database
    is unreachable (a failover, a restart, a pod scheduled before the database) waits for
    it as a running worker rides out an outage: ``db_unavailable`` once, then retries with
    a backoff capped like the services' (docs/operations/deploys.md). A refusal that is
    not an outage (bad credentials, no such database) still ends the command at once."""
    log = venturi.logs.get_logger("venturi.cli")
    loop = asyncio.get_running_loop()
    down_since: float | None = None
    while True:
        try:
            queue = await stack.enter_async_context(venturi.Queue.connect(
                dsn, prefix=prefix, listen_dsn=listen_dsn, pooler=pooler))
        except venturi.DatabaseUnavailable as exc:
            if down_since is None:
                down_since = loop.time()
                log.warning("db_unavailable", service="connect", error=str(exc))
            down = loop.time() - down_since
            await asyncio.sleep(min(0.1 * 2 ** min(down, 10), cap))
            continue
        if down_since is not None:
            log.info("db_available", service="connect",
                     outage_seconds=round(loop.time() - down_since, 3))
        return queue


def drain(
    ctx: typer.Context,
    worker_name: Annotated[str | None, typer.Option(
        "--worker", help="Drain only the worker with this name.")] = None,
    all_workers: Annotated[bool, typer.Option("--all", help="Drain every worker.")] = False,
    grace: Annotated[str | None, typer.Option(
        help="Override the workers' own grace period (e.g. 30s).")] = None,
    wait: Annotated[bool, typer.Option(
        "--wait", help="Wait until the drained workers have exited.")] = False,
    timeout: Annotated[str, typer.Option(
        help="With --wait: give up (exit 1) after this long.")] = "5m",
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Ask running workers to stop claiming, finish (or release) their jobs, and exit."""
    s = session(ctx, dsn, prefix, json)
    if (worker_name is None) == (not all_workers):
        fail("give --worker NAME or --all (one of the two)", code=USAGE)
    override = params.optional_duration(grace, "--grace")
    limit = params.duration(timeout, "--timeout")
    seconds = None if override is None else override.total_seconds()
    request: dict[str, Any] = {"op": "drain", "worker": worker_name, "grace": seconds}

    async def go(queue: venturi.Queue) -> list[venturi.WorkerInfo]:
        live = await queue.workers()
        if worker_name is not None and worker_name not in {w.name for w in live}:
            names = ", ".join(sorted(w.name for w in live)) or "none"
            fail(f"--worker: no worker named {worker_name!r} in queue {s.prefix} "
                 f"(registered: {names})")
        targets = [w for w in live if worker_name is None or w.name == worker_name]
        await queue.drain(worker_name, grace=seconds)
        if wait:
            await _wait_gone(queue, targets, limit)
        return targets

    targets = s.run(go)
    if s.json:
        output.emit_json({"sent": request, "workers": [w.name for w in targets],
                          "exited": wait})
        return
    who = f"worker {worker_name}" if worker_name is not None else (
        f"all workers ({len(targets)} registered)")
    typer.echo(f"{'drained' if wait else 'asked to drain:'} {who}")


async def _wait_gone(queue: venturi.Queue, targets: list[venturi.WorkerInfo],
                     limit: timedelta) -> None:
    """Poll the workers table until every target boot has deregistered (a worker
    removes its row on a clean exit; a crashed one leaves it, hence the limit)."""
    waiting = {(w.name, w.boot_id) for w in targets}
    deadline = asyncio.get_running_loop().time() + limit.total_seconds()
    while True:
        left = [w for w in await queue.workers() if (w.name, w.boot_id) in waiting]
        if not left:
            return
        if asyncio.get_running_loop().time() > deadline:
            fail(f"--wait: {len(left)} worker(s) still registered after {output.span(limit)}: "
                 f"{', '.join(sorted(w.name for w in left))}")
        await asyncio.sleep(0.2)


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(drain)
