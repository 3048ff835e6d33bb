"""Read-only commands: stats, jobs, job, workers."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
from typing import Annotated, Any

import typer

import venturi

from . import output, params
from .session import USAGE, DsnOption, JsonOption, PrefixOption, fail, session

# --- stats ------------------------------------------------------------------------------


def stats_document(snap: venturi.Snapshot,
                   held: dict[str, str] | None = None) -> dict[str, Any]:
    """``held``: what holds a kind back (paused, concurrency, rate; ``Queue.kinds()``)."""
    held = held or {}
    kinds = sorted(set(snap.pending_by_kind) | set(snap.scheduled_by_kind)
                   | set(snap.claimed_by_kind) | set(snap.dead_by_kind) | set(held))
    rows = []
    for kind in kinds:
        age = snap.oldest_pending_age.get(kind)
        rows.append({
            "kind": kind,
            "runnable": snap.pending_by_kind.get(kind, 0),
            "scheduled": snap.scheduled_by_kind.get(kind, 0),
            "claimed": snap.claimed_by_kind.get(kind, 0),
            "dead": snap.dead_by_kind.get(kind, 0),
            "oldest_runnable_age_seconds": None if age is None else age.total_seconds(),
            "held": held.get(kind),
        })
    totals = {status.value: snap.counts_by_status.get(status.value, 0) for status in venturi.Status}
    return {"at": output.timestamp(output.now()), "kinds": rows, "totals": totals}


def print_stats(doc: dict[str, Any]) -> None:
    rows = [
        [r["kind"], r["runnable"], r["scheduled"], r["claimed"], r["dead"],
         "-" if r["oldest_runnable_age_seconds"] is None
         else output.span(dt.timedelta(seconds=r["oldest_runnable_age_seconds"])),
         r["held"] or "-"]
        for r in doc["kinds"]
    ]
    if rows:
        output.table(["KIND", "RUNNABLE", "SCHEDULED", "CLAIMED", "DEAD", "OLDEST RUNNABLE",
                      "HELD BY"], rows,
                     right=["RUNNABLE", "SCHEDULED", "CLAIMED", "DEAD", "OLDEST RUNNABLE"])
    else:
        typer.echo("no pending, claimed or dead jobs")
    t = doc["totals"]
    typer.echo(f"total: {t['pending']} pending, {t['claimed']} claimed, "
               f"{t['completed']} completed, {t['dead']} dead")


def stats(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh in place.")] = False,
    interval: Annotated[str, typer.Option(help="Refresh interval with --watch.")] = "2s",
    iterations: Annotated[int, typer.Option(
        min=0, help="With --watch: stop after this many refreshes (0: until Ctrl-C).")] = 0,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Per kind: runnable and scheduled pending jobs, claimed, dead, oldest runnable age,
    and what holds it back (a pause, its concurrency or its rate)."""
    s = session(ctx, dsn, prefix, json)
    every = params.duration(interval, "--interval")
    if not watch:
        doc = s.run(_snapshot)
        if s.json:
            output.emit_json(doc)
        else:
            print_stats(doc)
        return

    clear = sys.stdout.isatty() and not s.json

    async def loop(queue: venturi.Queue) -> None:
        n = 0
        while True:
            doc = await _snapshot(queue)
            if s.json:
                # A stream of snapshots: one compact document per line (JSON Lines).
                typer.echo(output.compact_json(doc))
            else:
                if clear:
                    typer.echo("\x1b[H\x1b[2J", nl=False)  # home + clear: refresh in place
                elif n:
                    typer.echo()
                typer.echo(f"venturi stats  {s.prefix}  every {output.span(every)}  "
                           f"{doc['at']}")
                print_stats(doc)
            n += 1
            if iterations and n >= iterations:
                return
            await asyncio.sleep(every.total_seconds())

    s.run(loop)


async def _snapshot(queue: venturi.Queue) -> dict[str, Any]:
    held = {k.kind: k.held for k in await queue.kinds() if k.held is not None}
    return stats_document(await queue.stats(), held)


# --- jobs -------------------------------------------------------------------------------


def jobs(
    ctx: typer.Context,
    kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
    status: Annotated[str | None, typer.Option(
        help="Only this status: pending, claimed, completed or dead.")] = None,
    since: Annotated[str | None, typer.Option(
        help="Only jobs finished within this long (e.g. 1h); implies finished jobs.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Page size.")] = 50,
    before: Annotated[str | None, typer.Option(
        help="Cursor printed by the previous page.")] = None,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Job history, newest first, one page at a time (prints the next page's cursor)."""
    s = session(ctx, dsn, prefix, json)
    st = params.status(status)
    window = params.optional_duration(since, "--since")
    if window is not None and st is not None and not st.terminal:
        fail(f"--since filters on the finish time; {st.value} jobs have none", code=USAGE)
    finished_since = None if window is None else output.now() - window

    async def go(queue: venturi.Queue) -> venturi.Page:
        return await queue.history(kind=kind, status=st, finished_since=finished_since,
                                   before=before, limit=limit)

    page = s.run(go)
    if s.json:
        output.emit_json({"jobs": [output.job_json(j) for j in page.jobs],
                          "next_cursor": page.next_cursor})
        return
    if not page.jobs:
        typer.echo("no jobs")
    else:
        ref = output.now()
        output.table(
            ["ID", "KIND", "STATUS", "PRIORITY", "RUNS", "FAILS", "CREATED", "FINISHED",
             "SUBJECT"],
            [[j.id, j.kind, j.status.value, output.priority_name(j.priority), j.run_count,
              f"{j.failure_count}/{j.max_failures}", output.ago(j.created_at, ref),
              output.ago(j.finished_at, ref), j.subject] for j in page.jobs],
            right=["RUNS", "FAILS"], colour={"STATUS": output.coloured_status},
        )
    if page.next_cursor:
        typer.echo(f"next page: --before {page.next_cursor}")


# --- job --------------------------------------------------------------------------------


def job(
    ctx: typer.Context,
    id: Annotated[str, typer.Argument(help="The job id (a UUID).", show_default=False)],
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """One job's row and its whole journal."""
    s = session(ctx, dsn, prefix, json)

    async def go(queue: venturi.Queue) -> tuple[venturi.JobRecord | None,
                                                list[venturi.JournalRecord]]:
        record = await queue.job(id)
        return record, ([] if record is None else await queue.journal(id))

    record, entries = s.run(go)
    if record is None:
        fail(f"unknown job id {id} (in queue {s.prefix}; cleaned up or never existed)")
    if s.json:
        output.emit_json({"job": output.job_json(record),
                          "journal": [output.journal_json(e) for e in entries]})
        return
    print_job(record, entries)


def print_job(j: venturi.JobRecord, entries: list[venturi.JournalRecord]) -> None:
    ref = output.now()

    def when(t: Any) -> str:
        return "-" if t is None else f"{output.clock_time(t)} ({output.ago(t, ref)})"

    output.fields([
        ("id", j.id), ("kind", j.kind), ("status", output.coloured_status(j.status.value)),
        ("priority", output.priority_name(j.priority)), ("subject", j.subject),
        ("dedup key", j.dedup_key), ("payload", output.compact_json(j.payload)),
        ("carry", None if j.carry is None else output.compact_json(j.carry)),
        ("runs", j.run_count), ("failures", f"{j.failure_count} of {j.max_failures}"),
        ("periodic", j.periodic), ("created", when(j.created_at)),
        ("visible", when(j.visible_at)), ("claimed by", j.claimed_by),
        ("claim expires", when(j.claim_expires_at)), ("finished", when(j.finished_at)),
        ("trace id", j.trace_id),
        ("result", None if j.result is None else output.compact_json(j.result)),
        ("waiting on", f"{j.waiting} dependencies" if j.waiting else None),
    ])
    typer.echo()
    typer.echo(f"journal ({len(entries)} {'entry' if len(entries) == 1 else 'entries'})")
    if entries:
        output.table(
            ["RUN", "OUTCOME", "RECORDED", "NOTE", "ATTACHMENT"],
            [[e.run_no, e.outcome.value, output.ago(e.recorded_at, ref), e.note, e.attachment]
             for e in entries],
            right=["RUN"],
        )


# --- workers ------------------------------------------------------------------------------


def workers(
    ctx: typer.Context,
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """Workers registered in this queue: host, pid, kinds, load, last heartbeat."""
    s = session(ctx, dsn, prefix, json)
    found = s.run(_list_workers)
    if s.json:
        output.emit_json({"workers": [output.worker_json(w) for w in found]})
        return
    if not found:
        typer.echo("no workers")
        return
    ref = output.now()
    output.table(
        ["NAME", "HOST", "PID", "KINDS", "CONCURRENCY", "IN-FLIGHT", "STARTED", "HEARTBEAT",
         "STATE"],
        [[w.name, w.host, w.pid, ",".join(w.kinds), w.concurrency, w.in_flight,
          output.ago(w.started_at, ref), output.ago(w.last_seen, ref),
          "draining" if w.draining else "running"] for w in found],
        right=["PID", "CONCURRENCY", "IN-FLIGHT"],
    )


async def _list_workers(queue: venturi.Queue) -> list[venturi.WorkerInfo]:
    return await queue.workers()


# --- workflows ------------------------------------------------------------------------------


def workflow(
    ctx: typer.Context,
    id: Annotated[str, typer.Argument(help="The workflow id (a UUID).", show_default=False)],
    dsn: DsnOption = None, prefix: PrefixOption = None, json: JsonOption = False,
) -> None:
    """One workflow's steps: state, what each waits for, durations."""
    s = session(ctx, dsn, prefix, json)

    async def go(queue: venturi.Queue) -> venturi.WorkflowState | None:
        return await queue.workflow(id)

    found = s.run(go)
    if found is None:
        fail(f"unknown workflow id {id} (in queue {s.prefix})")
    names = {step.id: step.name for step in found.steps}
    if s.json:
        output.emit_json(output.workflow_json(found))
        return
    output.fields([("id", found.id), ("name", found.name),
                   ("created", output.clock_time(found.created_at)),
                   ("steps", len(found.steps)),
                   ("states", ", ".join(f"{k} {n}" for k, n in sorted(found.counts().items())))])
    typer.echo()
    output.table(
        ["STEP", "JOB", "STATUS", "AFTER", "RUNS", "DURATION"],
        [[step.name, step.id, "gone" if step.status is None else step.status.value,
          ",".join(names.get(a, str(a)) for a in step.after) or "-",
          "-" if step.job is None else step.job.run_count,
          "-" if step.duration is None else output.span(step.duration)]
         for step in found.steps],
        right=["RUNS", "DURATION"],
        colour={"STATUS": output.coloured_status},
    )


def register(app: typer.Typer) -> None:
    for fn in (stats, jobs, job, workers, workflow):
        app.command()(fn)
