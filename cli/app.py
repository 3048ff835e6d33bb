"""The ``venturi`` Typer application: global options and the command table.

Commands live in modules by area (queries: read-only; admin: changes to the
queue; supervise: running and draining workers). ``venturi dev`` is reserved
for the development server, registered by its own module.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

import venturi
from venturi.worker.signals import STOP_SIGNALS

from . import admin, dev, flow, queries, supervise, web
from .session import GlobalOptions, fail

# click's usage errors, from wherever this typer takes click (0.29 ships its own copy as a
# private module, earlier ones use click): the public typer.BadParameter's base.
_USAGE: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
# A group called without a command raises it to show its help (click 8.2 and later).
_HELP: type[Exception] | tuple[()] = getattr(
    sys.modules[_USAGE.__module__], "NoArgsIsHelpError", ())


def _one_line(exc: Any) -> NoReturn:
    """A bad option, value or command as one line, like every other error of the CLI."""
    path = exc.ctx.command_path if exc.ctx is not None else "venturi"
    fail(f"{' '.join(exc.format_message().split())} (see {path} --help)", code=exc.exit_code)


class OneLineUsage(TyperGroup):
    """Typer draws click's usage errors (a value out of range, an unknown option or
    command) as a box of six lines; the CLI's own checks print one ``venturi: error:``
    line (tests/cli/conftest.py ``one_line_error``). Both parses pass through here: the
    global options' (``make_context``) and the command's with its options (``invoke``)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except _HELP:
            raise
        except _USAGE as exc:
            _one_line(exc)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _HELP:
            raise
        except _USAGE as exc:
            _one_line(exc)


app = typer.Typer(
    name="venturi",
    cls=OneLineUsage,
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
