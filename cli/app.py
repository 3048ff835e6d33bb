"""Typer application: global options, error handling, and the commands."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

import venturi
from venturi.config import DEFAULT_PREFIX, mask_dsn

T = TypeVar("T")

app = typer.Typer(
    name="venturi",
    help="venturi: a durable job queue on PostgreSQL. Start, drain and inspect workers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Settings:
    dsn: str | None = None
    prefix: str = DEFAULT_PREFIX
    json: bool = False


settings = Settings()


def fail(message: str, code: int = 1) -> None:
    """One line on stderr, no traceback."""
    typer.echo(f"venturi: error: {message}", err=True)
    raise typer.Exit(code)


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]
    except venturi.VenturiError as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise AssertionError("unreachable")


def require_dsn() -> str:
    dsn = settings.dsn or os.environ.get("VENTURI_DSN")
    if not dsn:
        fail("no database given: pass --dsn or set VENTURI_DSN")
    assert dsn is not None
    return dsn


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"venturi {venturi.__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    dsn: Annotated[str | None, typer.Option(envvar="VENTURI_DSN", help="PostgreSQL DSN.")] = None,
    prefix: Annotated[str, typer.Option(envvar="VENTURI_PREFIX", help="Table prefix.")] =
        DEFAULT_PREFIX,
    json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=version_callback,
                                          is_eager=True, help="Print the version.")] = False,
) -> None:
    settings.dsn = dsn
    settings.prefix = prefix
    settings.json = json


@app.command()
def migrate(
    dsn: Annotated[str | None, typer.Option(help="PostgreSQL DSN.")] = None,
    prefix: Annotated[str | None, typer.Option(help="Table prefix.")] = None,
) -> None:
    """Apply schema migrations (prints what it applied; nothing the second time)."""
    if dsn:
        settings.dsn = dsn
    if prefix:
        settings.prefix = prefix
    target = require_dsn()

    async def go() -> list[str]:
        async with venturi.Queue.connect(target, prefix=settings.prefix, max_size=2) as q:
            return await q.migrate()

    applied = run(go)
    if applied:
        for name in applied:
            typer.echo(f"applied {name}")
    else:
        typer.echo(f"schema is up to date (prefix {settings.prefix}, {mask_dsn(target)})")


def main() -> Any:
    """Console-script entry point."""
    try:
        return app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
