"""``venturi dev``: the first command a newcomer runs.

Without a database (no ``--dsn``, no ``VENTURI_DSN``) it starts a throwaway PostgreSQL
(``venturi[embedded]``), then migrates, enqueues a batch of ``venturi.examples`` jobs, runs a
worker on them with a progress line until none is left, and stops the server. With a database
it does the same there; ``--enqueue-only`` stops after enqueueing (the compose ``demo`` service).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn
from uuid import UUID

import typer

import venturi
from venturi import embedded, examples
from venturi.config import DEFAULT_PREFIX, mask_dsn, parse_duration, validate_prefix

PROGRESS_INTERVAL = 0.25


@dataclass(frozen=True, kw_only=True, slots=True)
class DevOptions:
    dsn: str | None
    prefix: str
    jobs: int
    concurrency: int
    latency_ms: int
    data_dir: Path | None
    keep: bool
    enqueue_only: bool


def register(app: typer.Typer) -> None:
    """Add the ``dev`` command to the ``venturi`` application."""
    app.command("dev")(dev)


def dev(
    ctx: typer.Context,
    dsn: Annotated[str | None, typer.Option(
        help="PostgreSQL DSN; default: VENTURI_DSN, else an embedded throwaway server.")] = None,
    prefix: Annotated[str | None, typer.Option(help="Table prefix.")] = None,
    jobs: Annotated[int, typer.Option(min=1, max=100_000,
                                      help="How many example jobs to enqueue.")] = 40,
    concurrency: Annotated[int, typer.Option(min=1, max=1000, help="Worker slots.")] = 4,
    latency: Annotated[str, typer.Option(
        help="Simulated model latency per example job (e.g. 100ms, 0).")] = "150ms",
    data_dir: Annotated[Path | None, typer.Option(
        help="Embedded server's data directory, kept afterwards "
             "(default: a temporary one, removed on exit).")] = None,
    keep: Annotated[bool, typer.Option(
        "--keep", help="Keep the embedded server's data directory.")] = False,
    enqueue_only: Annotated[bool, typer.Option(
        "--enqueue-only", help="Enqueue the example jobs and exit (needs a DSN).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="Show the worker's logs.")] = False,
) -> None:
    """Try venturi: (embedded) PostgreSQL, migrate, example jobs, a worker, until done."""
    root = ctx.find_root().params
    options = DevOptions(
        dsn=dsn or root.get("dsn") or os.environ.get("VENTURI_DSN") or None,
        prefix=_prefix(prefix or root.get("prefix") or os.environ.get("VENTURI_PREFIX")),
        jobs=jobs,
        concurrency=concurrency,
        latency_ms=_latency_ms(latency),
        data_dir=data_dir,
        keep=keep or data_dir is not None,
        enqueue_only=enqueue_only,
    )
    if options.enqueue_only and options.dsn is None:
        _fail("--enqueue-only needs a database: pass --dsn or set VENTURI_DSN")
    if options.dsn is not None and data_dir is not None:
        _fail("--data-dir is for the embedded server: drop it or drop --dsn")
    if options.dsn is None and not embedded.available():
        _fail(f"no database given (--dsn or VENTURI_DSN) and {embedded.INSTALL_HINT}")

    from venturi.logs import configure, reset

    configure(level="info" if verbose else "warning")
    try:
        code = asyncio.run(_main(options))
    except venturi.VenturiError as exc:
        _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        reset()
    raise typer.Exit(code)


async def _main(options: DevOptions) -> int:
    if options.dsn is not None:
        _say(f"database: {mask_dsn(options.dsn)}")
        return await _demo(options.dsn, options)
    _say("starting an embedded PostgreSQL ...")
    async with embedded.EmbeddedPostgres(options.data_dir, keep=options.keep) as pg:
        fate = "kept" if options.keep else "removed on exit"
        _say(f"data directory: {pg.data_dir} ({fate})")
        _say(f"dsn: {pg.dsn}")
        try:
            code = await _demo(pg.dsn, options)
        finally:
            _say("stopping the embedded PostgreSQL ...")
    _say("stopped: nothing left running")
    return code


async def _demo(dsn: str, options: DevOptions) -> int:
    async with venturi.Queue.connect(dsn, prefix=options.prefix,
                                     max_size=options.concurrency + 4) as queue:
        applied = await queue.migrate()
        _say(f"migrated: {', '.join(applied)}" if applied else "schema is up to date")
        batch = examples.demo_batch(options.jobs, latency_ms=options.latency_ms)
        ids = await queue.enqueue_many(batch)
        unique = list(dict.fromkeys(ids))
        merged = len(ids) - len(unique)
        _say(f"enqueued {len(ids)} example jobs ({merged} merged into pending ones by dedup)"
             f" under prefix {options.prefix}")
        if options.enqueue_only:
            return 0
        code = await _work(queue, len(unique), options)
        await _show_journal(queue, ids[0])
        return code


async def _work(queue: venturi.Queue, total: int, options: DevOptions) -> int:
    worker = venturi.Worker(queue, tasks=list(examples.TASKS), concurrency=options.concurrency,
                            handle_signals=True)
    _say(f"worker {worker.name}: {options.concurrency} slots on "
         f"{', '.join(examples.kinds())} (Ctrl-C drains)")
    started = time.monotonic()
    progress = ProgressLine(worker, total)
    watcher = asyncio.create_task(progress.follow())
    try:
        await worker.run(until_empty=True)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    progress.show(final=True)
    elapsed = time.monotonic() - started
    done = worker.progress
    _say(f"done in {elapsed:.1f}s: {done.completed} completed, {done.dead} dead, "
         f"{done.paused} pauses, {done.retried} retries")
    return worker.exit_code or 0


async def _show_journal(queue: venturi.Queue, job_id: UUID) -> None:
    """The first job's journal: one entry per run, pauses and carry included."""
    job = await queue.job(job_id)
    if job is None:
        return
    _say(f"journal of {job.kind} {job.id} ({job.status.value}):")
    for entry in await queue.journal(job_id):
        extra = f" {entry.attachment}" if entry.attachment else ""
        _say(f"  run {entry.run_no}: {entry.outcome.value:<10} {entry.note or ''}{extra}")


class ProgressLine:
    """One status line, from the worker's own counts (``Worker.progress``: no queries)."""

    def __init__(self, worker: venturi.Worker, total: int) -> None:
        self.worker = worker
        self.total = total
        self.tty = sys.stdout.isatty()
        self._last = ""

    def show(self, *, final: bool = False) -> None:
        p = self.worker.progress
        finished = min(p.completed + p.dead, self.total)
        width = 30
        filled = width * finished // max(self.total, 1)
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {finished}/{self.total} finished"
                f" · {p.held} running · {p.dead} dead")
        if line == self._last and not final:
            return
        self._last = line
        if self.tty:
            sys.stdout.write(f"\r{line}" + ("\n" if final else ""))
            sys.stdout.flush()
        elif not final or line:
            typer.echo(line)

    async def follow(self) -> None:
        while True:
            self.show()
            await asyncio.sleep(PROGRESS_INTERVAL)


def _prefix(value: str | None) -> str:
    try:
        return validate_prefix(value or DEFAULT_PREFIX)
    except venturi.ConfigError as exc:
        _fail(str(exc))


def _latency_ms(text: str) -> int:
    try:
        return int(parse_duration(text, what="--latency").total_seconds() * 1000)
    except venturi.ConfigError as exc:
        _fail(str(exc))


def _say(message: str) -> None:
    typer.echo(message)


def _fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr, no traceback (the CLI's convention)."""
    typer.echo(f"venturi: error: {message}", err=True)
    raise typer.Exit(code)
