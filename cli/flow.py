"""Flow control commands: kinds, pause, resume, limits (docs/concepts/flow-control.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

import venturi
from venturi import KindState, Rate

from . import output
from .session import USAGE, DsnOption, JsonOption, PrefixOption, fail, session

KindsArgument = Annotated[list[str], typer.Argument(help="Task kinds.", show_default=False)]


def kind_document(k: KindState) -> dict[str, Any]:
    limits, sources = k.limits, k.sources
    return {
        "kind": k.kind,
        "paused": k.paused,
        "concurrency": limits.concurrency,
        "concurrency_source": sources["concurrency"],
        "rate": None if limits.rate is None else str(limits.rate),
        "rate_source": sources["rate"],
        "pending": k.pending,
        "claimed": k.claimed,
        "started_in_window": k.started_in_window,
        "held": k.held,
    }


def _limit_cell(value: object, source: str | None) -> str:
    return "-" if value is None else f"{value} ({source})"


def kinds(
    ctx: typer.Context,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Per kind: paused, the limits in force and where each comes from, counts, and
    what holds it back now (paused, concurrency, rate)."""
    s = session(ctx, dsn, prefix, json)

    async def go(queue: venturi.Queue) -> list[KindState]:
        return await queue.kinds()

    docs = [kind_document(k) for k in s.run(go)]
    if s.json:
        output.emit_json({"kinds": docs})
        return
    if not docs:
        typer.echo("no kinds yet: none declared by a worker, paused, limited, pending "
                   "or claimed")
        return
    output.table(
        ["KIND", "PAUSED", "CONCURRENCY", "RATE", "PENDING", "CLAIMED", "HELD BY"],
        [[d["kind"], "yes" if d["paused"] else "no",
          _limit_cell(d["concurrency"], d["concurrency_source"]),
          _limit_cell(d["rate"], d["rate_source"]), d["pending"], d["claimed"],
          d["held"] or "-"] for d in docs],
        right=["PENDING", "CLAIMED"])


def _each(ctx: typer.Context, names: list[str], dsn: str | None, prefix: str | None,
          json: bool, paused: bool) -> None:
    s = session(ctx, dsn, prefix, json)
    chosen = _kinds(names)

    async def go(queue: venturi.Queue) -> None:
        for kind in chosen:
            await (queue.pause(kind) if paused else queue.resume(kind))

    s.run(go)
    verb = "paused" if paused else "resumed"
    if s.json:
        output.emit_json({verb: chosen})
    else:
        for kind in chosen:
            typer.echo(f"{verb} {kind}")


def pause(
    ctx: typer.Context, kind: KindsArgument,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Claim no more jobs of these kinds on any worker (running ones finish; enqueues
    still work). Undo with venturi resume."""
    _each(ctx, kind, dsn, prefix, json, paused=True)


def resume(
    ctx: typer.Context, kind: KindsArgument,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Claim jobs of these paused kinds again."""
    _each(ctx, kind, dsn, prefix, json, paused=False)


def limits(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="The task kind.", show_default=False)],
    concurrency: Annotated[int | None, typer.Option(
        help="At most this many jobs of the kind claimed at once, on every worker.",
        show_default=False)] = None,
    rate: Annotated[str | None, typer.Option(
        help="At most N claims per second, minute or hour: 10/s, 600/m, 1000/h.",
        show_default=False)] = None,
    clear: Annotated[bool, typer.Option(
        "--clear", help="Drop the operator's limits: the code's apply again.")] = False,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Set a kind's limits, overriding its task class's until --clear."""
    s = session(ctx, dsn, prefix, json)
    (name,) = _kinds([kind])
    if clear and (concurrency is not None or rate is not None):
        fail("give --concurrency/--rate or --clear, not both", code=USAGE)
    if not clear and concurrency is None and rate is None:
        fail("give --concurrency N, --rate N/s|N/m|N/h, or --clear", code=USAGE)
    try:
        per = None if rate is None else Rate.parse(rate)
    except venturi.ConfigError as exc:
        fail(f"--rate: {exc}", code=USAGE)
    if concurrency is not None and not 1 <= concurrency <= 1_000_000:
        fail("--concurrency must be 1..1000000", code=USAGE)
    conc = concurrency

    async def go(queue: venturi.Queue) -> KindState:
        if clear:
            await queue.set_limits(name, concurrency=None, rate=None)
        else:
            changes: dict[str, Any] = {}
            if conc is not None:
                changes["concurrency"] = conc
            if per is not None:
                changes["rate"] = per
            await queue.set_limits(name, **changes)
        found = [k for k in await queue.kinds() if k.kind == name]
        return found[0] if found else KindState(name)

    state = s.run(go)
    doc = kind_document(state)
    if s.json:
        output.emit_json(doc)
        return
    typer.echo(f"{name}: concurrency {_limit_cell(doc['concurrency'], doc['concurrency_source'])}"
               f", rate {_limit_cell(doc['rate'], doc['rate_source'])}")


def _kinds(names: list[str]) -> list[str]:
    for name in names:
        if not name or name != name.strip():
            fail(f"kind {name!r}: give a kind without surrounding spaces", code=USAGE)
    return list(dict.fromkeys(names))


def register(app: typer.Typer) -> None:
    for fn in (kinds, pause, resume, limits):
        app.command()(fn)
