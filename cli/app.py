"""The ``venturi`` Typer application: global options and the command table.

Commands live in modules by area (queries: read-only; admin: changes to the
queue; supervise: running and draining workers). ``venturi dev`` is reserved
for the development server, registered by its own module.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

import venturi
from venturi.worker.signals import STOP_SIGNALS

from . import admin, dev, flow, queries, supervise, web
from .session import GlobalOptions

app = typer.Typer(
    name="venturi",
    help="venturi: a durable job queue on PostgreSQL. Start, drain and inspect workers.\n\n"
    "--dsn, --prefix and --json are accepted before or after the command.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"venturi {venturi.__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    dsn: Annotated[str | None, typer.Option(
        "--dsn", envvar="VENTURI_DSN", show_envvar=True, help="PostgreSQL DSN.")] = None,
    prefix: Annotated[str | None, typer.Option(
        "--prefix", envvar="VENTURI_PREFIX", show_envvar=True,
        help="Table prefix: one prefix, one queue (default venturi_).")] = None,
    json: Annotated[bool, typer.Option(
        "--json", help="One JSON document on stdout (see docs/cli-json.md).")] = False,
    pooler: Annotated[bool, typer.Option(
        "--pooler", envvar="VENTURI_POOLER", show_envvar=True,
        help="--dsn goes through a transaction-mode pooler (PgBouncer): no prepared "
             "statement cache. Give the worker --listen-dsn to reach PostgreSQL directly.")
    ] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    if ctx.invoked_subcommand != "worker":
        # Only a worker drains on SIGTERM; venturi.cli.main recorded the signals meanwhile.
        STOP_SIGNALS.release()
    ctx.obj = GlobalOptions(dsn=dsn, prefix=prefix, json=json, pooler=pooler)


supervise.register(app)
queries.register(app)
admin.register(app)
flow.register(app)
web.register(app)
dev.register(app)

__all__ = ["app", "main"]


def main() -> Any:
    """Run the application (``venturi.cli.main`` is the console script)."""
    try:
        return app()
    except KeyboardInterrupt:  # pragma: no cover - Ctrl-C outside a command's event loop
        sys.exit(130)
