"""What every command shares: the global options, opening the queue, and the one
place where errors become a single ``venturi: error:`` line.

Exit codes (documented in docs/operations/cli.md): 2 when the command line itself is wrong
and that is known before touching the database or the application (Typer's usage
errors, bad durations, bad option values, a missing DSN); 1 for everything the
world decides (database unreachable, wrong password, schema missing, unknown job
id or kind, an --app module that does not import); 130 on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, NoReturn, TypeVar
from urllib.parse import urlsplit

import typer

import venturi
from venturi.config import DEFAULT_PREFIX, mask_dsn, validate_prefix

T = TypeVar("T")

USAGE = 2
FAILURE = 1

# The same three options are accepted before the subcommand (on the app callback)
# and after it (on every command): an operator types them where they remember to.
DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", help="PostgreSQL DSN (env VENTURI_DSN).", show_default=False),
]
PrefixOption = Annotated[
    str | None,
    typer.Option("--prefix", help="Table prefix (env VENTURI_PREFIX; default venturi_).",
                 show_default=False),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="One JSON document on stdout (see docs/cli-json.md).")
]


@dataclass(frozen=True, slots=True)
class GlobalOptions:
    """What the app callback saw before the subcommand (env vars folded in)."""

    dsn: str | None = None
    prefix: str | None = None
    json: bool = False
    pooler: bool = False


@dataclass(frozen=True, slots=True)
class Session:
    """Resolved options of one invocation."""

    dsn: str | None
    prefix: str
    json: bool
    pooler: bool = False

    def with_dsn(self, dsn: str) -> Session:
        return dataclasses.replace(self, dsn=dsn)

    def require_dsn(self) -> str:
        if not self.dsn:
            fail("no database given: pass --dsn or set VENTURI_DSN", code=USAGE)
        return self.dsn

    def run(self, fn: Callable[[venturi.Queue], Awaitable[T]], *, max_size: int = 2) -> T:
        """Open the queue, run ``fn`` on it, close it; errors become one line."""
        dsn = self.require_dsn()

        async def go() -> T:
            async with venturi.Queue.connect(
                dsn, prefix=self.prefix, min_size=1, max_size=max_size, pooler=self.pooler
            ) as queue:
                return await fn(queue)

        return run_async(go, dsn=dsn)


def session(
    ctx: typer.Context, dsn: str | None = None, prefix: str | None = None, json: bool = False
) -> Session:
    """Merge a command's own --dsn/--prefix/--json over the global ones.

    Only the app callback reads the environment, so an explicit option on either
    side of the subcommand always beats VENTURI_DSN / VENTURI_PREFIX.
    """
    glob = ctx.obj if isinstance(ctx.obj, GlobalOptions) else GlobalOptions()
    chosen_prefix = prefix or glob.prefix or DEFAULT_PREFIX
    try:
        validate_prefix(chosen_prefix)
    except venturi.ConfigError as exc:
        fail(f"--prefix: {exc}", code=USAGE)
    return Session(dsn=dsn or glob.dsn, prefix=chosen_prefix, json=json or glob.json,
                   pooler=glob.pooler)


def fail(message: str, *, code: int = FAILURE, dsn: str | None = None) -> NoReturn:
    """One line on stderr, never a traceback, never a password."""
    line = (message.strip().splitlines() or ["failed"])[0]
    if dsn:
        line = scrub(line, dsn)
    typer.echo(f"venturi: error: {line}", err=True)
    raise typer.Exit(code)


def scrub(text: str, dsn: str) -> str:
    """Remove the DSN's password from ``text`` wherever it occurs (belt and braces:
    the store masks DSNs in its messages, but a driver message might echo one)."""
    text = text.replace(dsn, mask_dsn(dsn))
    for secret in _passwords(dsn):
        text = text.replace(secret, "***")
    return text


def _passwords(dsn: str) -> list[str]:
    found: list[str] = []
    try:
        password = urlsplit(dsn).password
    except ValueError:
        password = None
    if password:
        found.append(password)
    found += re.findall(r"password\s*=\s*(\S+)", dsn, flags=re.IGNORECASE)
    return [p for p in found if len(p) >= 3]  # a 1-2 char "password" would mangle every line


def run_async(fn: Callable[[], Awaitable[T]], *, dsn: str | None = None) -> T:
    """Run a coroutine to completion, turning every failure into one line."""

    async def main() -> T:
        return await fn()

    try:
        return asyncio.run(main())
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as caught:
        # A task group (the worker's services) wraps what one of its tasks raised: the
        # line names that error, not the group.
        exc = _sole_error(caught)
        if isinstance(exc, venturi.VenturiError):
            fail(str(exc) or type(exc).__name__, dsn=dsn)
        # A bug, or an error the library did not classify. The operator still gets
        # one line; the traceback is one environment variable away.
        if os.environ.get("VENTURI_DEBUG"):
            traceback.print_exc()
        fail(f"unexpected {type(exc).__name__}: {exc} (set VENTURI_DEBUG=1 for the traceback)",
             dsn=dsn)


def _sole_error(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
