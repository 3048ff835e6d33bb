"""``venturi web``: serve the dashboard (the ``web`` extra)."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

import venturi
import venturi.logs

from . import loader
from .session import USAGE, DsnOption, PrefixOption, fail, run_async, session

log = venturi.logs.get_logger("venturi.web")


def web(
    ctx: typer.Context,
    http: Annotated[str, typer.Option(
        help="Serve on HOST:PORT.")] = "127.0.0.1:8080",
    read_only: Annotated[bool, typer.Option(
        "--read-only", help="Views only: no action routes, no buttons.")] = False,
    token: Annotated[str | None, typer.Option(
        envvar="VENTURI_WEB_TOKEN", show_envvar=True, show_default=False,
        help="Operators sign in with this token to retry, cancel and drain (prefer the "
             "environment variable: a command line is visible to every local user). "
             "Without one the dashboard only shows.")] = None,
    app: Annotated[str | None, typer.Option(
        "--app", envvar="VENTURI_APP", show_default=False,
        help="Module defining the tasks, for the periodic page's schedules.")] = None,
    refresh: Annotated[float, typer.Option(
        min=0.1, max=3600, help="Seconds between live refreshes while someone watches.")] = 2.0,
    log_format: Annotated[str | None, typer.Option(
        help="json or console (default: console on a terminal, json otherwise).")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    dsn: DsnOption = None, prefix: PrefixOption = None,
) -> None:
    """Serve the web dashboard: live counts, jobs, workers; retry, cancel and drain."""
    s = session(ctx, dsn, prefix)
    try:
        import uvicorn  # noqa: F401

        from venturi.web import DashboardOptions, TokenAuth, create_app
        from venturi.web.server import Server, bind
    except ImportError:
        fail("venturi web needs the web extra: pip install 'venturi[web]'")
    if log_format not in (None, "json", "console"):
        fail(f"--log-format: {log_format!r} is not json or console", code=USAGE)
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        fail(f"--log-level: {log_level!r} is not debug, info, warning or error", code=USAGE)
    auth = None
    if token is not None and not read_only:
        try:
            auth = TokenAuth(token)
        except ValueError as exc:
            fail(f"--token: {exc}", code=USAGE)
    try:
        sock = bind(http)
    except venturi.ConfigError as exc:
        fail(str(exc), code=USAGE)
    tasks = list(loader.app_tasks(app).values()) if app else None
    target = s.require_dsn()
    fmt: venturi.logs.LogFormat = "json" if log_format == "json" else (
        "console" if log_format == "console" else "auto")
    venturi.logs.configure(fmt, log_level)

    async def go() -> None:
        async with venturi.Queue.connect(target, prefix=s.prefix, pooler=s.pooler) as queue:
            await queue.stats()  # a missing schema or a wrong DSN: one line, before serving
            application = create_app(
                queue, auth=auth, read_only=read_only,
                options=DashboardOptions(refresh=refresh, tasks=tasks))
            server = Server(application)
            host, port = sock.getsockname()[:2]
            mode = "read-only" if read_only else ("actions" if auth else "view-only (no token)")
            log.info("dashboard_listening", url=f"http://{_host(host)}:{port}/", mode=mode,
                     prefix=s.prefix, pid=os.getpid())
            await server.serve(sockets=[sock])

    try:
        run_async(go, dsn=target)
    finally:
        sock.close()
        venturi.logs.reset()


def _host(host: Any) -> str:
    return f"[{host}]" if ":" in str(host) else str(host)


def register(app: typer.Typer) -> None:
    app.command()(web)
