"""How results look: aligned tables and relative times for people, one stable
JSON document for machines (shapes documented in docs/cli-json.md).

Colour is added with ``typer.style`` and printed with ``typer.echo``, which
strips it when stdout is not a terminal, so pipes and files get plain text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import orjson
import typer

import venturi

_STATUS_COLOURS = {
    "pending": typer.colors.CYAN,
    "claimed": typer.colors.YELLOW,
    "completed": typer.colors.GREEN,
    "dead": typer.colors.RED,
}
_PRIORITY_NAMES = {int(p): p.name.lower() for p in venturi.Priority}


def now() -> dt.datetime:
    # Relative times are for reading only ("3m ago"); the local clock is close
    # enough, and asking the database for its time would cost a round trip.
    return dt.datetime.now(dt.UTC)


# --- durations and times -------------------------------------------------------------


def span(delta: dt.timedelta) -> str:
    """A compact duration: ``45s``, ``3m``, ``1h5m``, ``2d3h``."""
    seconds = int(abs(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m" + (f"{seconds}s" if seconds and minutes < 10 else "")
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h" + (f"{minutes}m" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days}d" + (f"{hours}h" if hours else "")


def ago(when: dt.datetime | None, reference: dt.datetime | None = None) -> str:
    """``3m ago`` for the past, ``in 5m`` for the future, ``-`` for nothing."""
    if when is None:
        return "-"
    delta = (reference or now()) - when
    if abs(delta) < dt.timedelta(seconds=1):
        return "just now"
    return f"{span(delta)} ago" if delta > dt.timedelta(0) else f"in {span(delta)}"


def timestamp(when: dt.datetime | None) -> str | None:
    """ISO 8601 in UTC, the JSON form of every time."""
    return None if when is None else when.astimezone(dt.UTC).isoformat()


def clock_time(when: dt.datetime) -> str:
    """``2026-11-29 07:58:34Z``: absolute time for people, to the second, in UTC."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def priority_name(value: int) -> str:
    return _PRIORITY_NAMES.get(value, str(value))


def coloured_status(value: str) -> str:
    colour = _STATUS_COLOURS.get(value)
    return typer.style(value, fg=colour) if colour else value


# --- tables --------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
          right: Sequence[str] = (), colour: dict[str, Any] | None = None) -> None:
    """Print an aligned table. ``right`` names right-aligned (numeric) columns;
    ``colour`` maps a column name to a function styling its cells (applied after
    padding, so escape codes never skew the alignment)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    last = len(headers) - 1

    def line(values: Sequence[str], style: bool, header: bool = False) -> str:
        parts = []
        for i, (name, text) in enumerate(zip(headers, values, strict=True)):
            padded = text.rjust(widths[i]) if name in right else (
                text if i == last else text.ljust(widths[i]))
            if header:
                padded = typer.style(padded, bold=True)
            elif style and colour and name in colour:
                padded = padded.replace(text, colour[name](text), 1)
            parts.append(padded)
        return "  ".join(parts).rstrip()

    typer.echo(line(list(headers), style=False, header=True))
    for row in cells:
        typer.echo(line(row, style=True))


def fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """Print ``name  value`` lines, names aligned."""
    width = max((len(name) for name, _ in pairs), default=0)
    for name, value in pairs:
        typer.echo(f"{typer.style(name.ljust(width), bold=True)}  {_cell(value)}")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return compact_json(value)
    return str(value)


def compact_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


# --- JSON ------------------------------------------------------------------------------


def emit_json(document: Any) -> None:
    """Write one JSON document (keys in the documented order) and a newline."""
    typer.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def job_json(job: venturi.JobRecord) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "kind": job.kind,
        "status": job.status.value,
        "priority": job.priority,
        "priority_name": priority_name(job.priority),
        "subject": job.subject,
        "dedup_key": job.dedup_key,
        "payload": job.payload,
        "carry": job.carry,
        "periodic": job.periodic,
        "run_count": job.run_count,
        "failure_count": job.failure_count,
        "max_failures": job.max_failures,
        "created_at": timestamp(job.created_at),
        "visible_at": timestamp(job.visible_at),
        "claimed_by": job.claimed_by,
        "claim_expires_at": timestamp(job.claim_expires_at),
        "finished_at": timestamp(job.finished_at),
        "trace_id": job.trace_id,
        "result": job.result,
        "waiting": job.waiting,
    }


def workflow_json(wf: venturi.WorkflowState) -> dict[str, Any]:
    return {
        "id": str(wf.id),
        "name": wf.name,
        "created_at": timestamp(wf.created_at),
        "counts": wf.counts(),
        "steps": [{
            "name": step.name,
            "id": str(step.id),
            "status": None if step.status is None else step.status.value,
            "after": [str(a) for a in step.after],
            "run_count": None if step.job is None else step.job.run_count,
            "waiting": None if step.job is None else step.job.waiting,
            "finished_at": None if step.job is None else timestamp(step.job.finished_at),
            "duration": None if step.duration is None else step.duration.total_seconds(),
            "result": None if step.job is None else step.job.result,
        } for step in wf.steps],
    }


def journal_json(entry: venturi.JournalRecord) -> dict[str, Any]:
    return {
        "id": entry.id,
        "run_no": entry.run_no,
        "outcome": entry.outcome.value,
        "recorded_at": timestamp(entry.recorded_at),
        "note": entry.note,
        "attachment": entry.attachment,
    }


def worker_json(info: venturi.WorkerInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "boot_id": info.boot_id,
        "host": info.host,
        "pid": info.pid,
        "kinds": list(info.kinds),
        "concurrency": info.concurrency,
        "in_flight": info.in_flight,
        "draining": info.draining,
        "started_at": timestamp(info.started_at),
        "last_heartbeat": timestamp(info.last_seen),
    }
