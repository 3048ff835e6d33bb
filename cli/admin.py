"""Commands that change the queue: migrate, enqueue, cancel, retry, cleanup."""

from __future__ import annotations

from typing import Annotated

import typer

import venturi

from . import loader, output, params
from .session import USAGE, DsnOption, JsonOption, PrefixOption, fail, session

AppOption = Annotated[str, typer.Option(
    "--app", envvar="VENTURI_APP", show_default=False,
    help="Module defining the tasks, e.g. myproject.tasks (env VENTURI_APP).")]


def migrate(
    ctx: typer.Context,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Apply schema migrations (prints what it applied; nothing the second time)."""
    s = session(ctx, dsn, prefix, json)

    async def go(queue: venturi.Queue) -> list[str]:
        return await queue.migrate()

    applied = s.run(go)
    if s.json:
        output.emit_json({"prefix": s.prefix, "applied": applied})
    elif applied:
        for name in applied:
            typer.echo(f"applied {name}")
    else:
        typer.echo(f"schema is up to date (prefix {s.prefix})")


def enqueue(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="The task kind.", show_default=False)],
    app: AppOption,
    payload: Annotated[str, typer.Option(help="The task's fields as a JSON object.")] = "{}",
    delay: Annotated[str | None, typer.Option(help="Run no sooner than this (e.g. 5m).")] = None,
    priority: Annotated[str | None, typer.Option(
        help="high, normal or low (default: the task's own).")] = None,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Enqueue one task; the payload is checked against the task's fields first."""
    s = session(ctx, dsn, prefix, json)
    fields = params.json_object(payload, "--payload")
    wait = params.optional_duration(delay, "--delay")
    prio = params.priority(priority)
    s.require_dsn()
    task_cls = loader.pick(loader.app_tasks(app), kind)
    try:
        task = task_cls.from_payload(fields)
    except venturi.PayloadDecodeError as exc:
        fail(f"--payload does not fit task {kind!r}: {exc} (nothing enqueued)")

    async def go(queue: venturi.Queue) -> venturi.Enqueued:
        return await queue.enqueue(task, delay=wait, priority=prio)

    result = s.run(go)
    if s.json:
        output.emit_json({"id": str(result.id), "kind": kind, "merged": result.merged})
    elif result.merged:
        typer.echo(f"merged into pending job {result.id} ({kind})")
    else:
        when = f", runs in {output.span(wait)}" if wait else ""
        typer.echo(f"enqueued {result.id} ({kind}{when})")


def cancel(
    ctx: typer.Context,
    ids: Annotated[list[str] | None, typer.Argument(
        help="Job ids to cancel.", show_default=False)] = None,
    subject: Annotated[str | None, typer.Option(
        help="Cancel every job in this subject's subtree instead.")] = None,
    workflow: Annotated[str | None, typer.Option(
        help="Cancel the unfinished steps of this workflow (its id) instead.")] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Do not ask when more than one job would go.")] = False,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Delete jobs by id, by subject subtree or a workflow's unfinished steps; running ones
    are stopped by their workers."""
    s = session(ctx, dsn, prefix, json)
    if bool(ids) + (subject is not None) + (workflow is not None) != 1:
        fail("give job ids, --subject URI or --workflow ID (one of the three)", code=USAGE)
    if workflow is not None:
        params.uuid_value(workflow, "--workflow")
    if subject is not None and not subject.strip("/").strip():
        fail("--subject: empty after stripping '/': refusing to match every job", code=USAGE)

    async def would_go(queue: venturi.Queue) -> int:
        if subject is not None:
            return await queue.count(subject=subject)
        if workflow is not None:
            found = await queue.workflow(workflow)
            if found is None:
                fail(f"unknown workflow id {workflow} in queue {s.prefix} (nothing changed)")
            return sum(1 for step in found.steps
                       if step.status in (venturi.Status.PENDING, venturi.Status.CLAIMED))
        await _require_jobs(queue, ids or [])
        return len(set(ids or []))

    n = s.run(would_go)
    if n > 1 and not yes:
        what = (f"in subtree {subject}" if subject is not None
                else f"of workflow {workflow}" if workflow is not None else "given")
        try:
            confirmed = typer.confirm(f"Cancel {n} jobs {what}?", err=True)
        except typer.Abort:  # no answer: end of input, or Ctrl-C at the prompt
            typer.echo(err=True)
            confirmed = False
        if not confirmed:
            fail("not confirmed: nothing cancelled (--yes skips the question)")

    async def go(queue: venturi.Queue) -> int:
        if subject is not None:
            return await queue.cancel(subject=subject)
        if workflow is not None:
            return await queue.cancel(workflow=workflow)
        return await queue.cancel(ids=ids or [])

    removed = s.run(go) if n else 0
    if s.json:
        output.emit_json({"removed": removed})
    else:
        typer.echo(f"removed {removed} job{'' if removed == 1 else 's'}")


def retry(
    ctx: typer.Context,
    ids: Annotated[list[str] | None, typer.Argument(
        help="Dead job ids to put back.", show_default=False)] = None,
    kind: Annotated[str | None, typer.Option(help="Every dead job of this kind.")] = None,
    status: Annotated[str, typer.Option(help="Only dead jobs can be retried.")] = "dead",
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Redrive dead jobs: back to pending with a fresh failure budget (journal: redriven)."""
    s = session(ctx, dsn, prefix, json)
    params.status(status, allowed=(venturi.Status.DEAD,))
    if bool(ids) == (kind is not None):
        fail("give dead job ids or --kind KIND (one of the two)", code=USAGE)

    async def go(queue: venturi.Queue) -> int:
        if kind is not None:
            return await queue.retry(kind=kind)
        records = await _require_jobs(queue, ids or [])
        dead = [str(r.id) for r in records if r.status is venturi.Status.DEAD]
        for r in records:
            if r.status is not venturi.Status.DEAD:
                typer.echo(f"venturi: skipped {r.id}: it is {r.status.value}, not dead", err=True)
        return await queue.retry(ids=dead) if dead else 0

    retried = s.run(go)
    if s.json:
        output.emit_json({"retried": retried})
    else:
        typer.echo(f"retried {retried} job{'' if retried == 1 else 's'}")


def cleanup(
    ctx: typer.Context,
    older_than: Annotated[str, typer.Option(
        help="Delete jobs finished longer ago than this (e.g. 7d).", show_default=False)],
    kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
    status: Annotated[str | None, typer.Option(
        help="completed or dead (default: both).")] = None,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Delete finished jobs (and their journals) older than --older-than."""
    s = session(ctx, dsn, prefix, json)
    age = params.duration(older_than, "--older-than")
    st = params.status(status, allowed=(venturi.Status.COMPLETED, venturi.Status.DEAD))
    cutoff = output.now() - age

    async def go(queue: venturi.Queue) -> int:
        return await queue.cleanup(finished_before=cutoff, kind=kind, status=st)

    removed = s.run(go)
    if s.json:
        output.emit_json({"removed": removed, "finished_before": output.timestamp(cutoff)})
    else:
        typer.echo(f"removed {removed} job{'' if removed == 1 else 's'} finished before "
                   f"{output.timestamp(cutoff)}")


async def _require_jobs(queue: venturi.Queue, ids: list[str]) -> list[venturi.JobRecord]:
    """The records of ``ids``; an unknown id stops the command before it changes anything."""
    records = []
    for id in dict.fromkeys(ids):
        record = await queue.job(id)
        if record is None:
            fail(f"unknown job id {id} (nothing changed)")
        records.append(record)
    return records


def register(app: typer.Typer) -> None:
    for fn in (migrate, enqueue, cancel, retry, cleanup):
        app.command()(fn)
