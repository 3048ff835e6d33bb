"""venturi used as a library logs through the standard ``logging`` module
(docs/operations/logging.md): an application that configures nothing sees warnings
only, one that configures ``logging`` gets venturi's records, fields and all, in its
own handlers, and nothing in venturi configures logging for it.

The library cases run a real worker in a subprocess, so that what reaches the real
stdout and stderr is what is asserted, in a process nobody configured."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

import venturi
from tests.conftest import drop_prefix
from venturi.logs import Event, get_logger

ROOT = Path(__file__).resolve().parent.parent

# A drain every script runs: two jobs that complete and one that fails for good, so
# the worker logs debug (per job), info (start, stop) and warning (failed, dead) events.
DRAIN = '''
import asyncio, os
import venturi

class Fine(venturi.Task, kind="log.fine"):
    async def run(self, ctx: venturi.Context) -> None:
        return None

class Broken(venturi.Task, kind="log.broken", max_failures=1):
    async def run(self, ctx: venturi.Context) -> None:
        raise RuntimeError("boom")

async def drain(check=lambda where: None):
    async with venturi.Queue.connect(os.environ["DSN"], prefix=os.environ["PREFIX"]) as q:
        check("Queue.connect")
        await q.migrate()
        fine = [await q.enqueue(Fine()) for _ in range(2)]
        broken = await q.enqueue(Broken())
        worker = venturi.Worker(q, tasks=[Fine, Broken], concurrency=2)
        check("Worker()")
        await worker.run(until_empty=True)
        check("Worker.run()")
        assert worker.exit_code == 0
        return [str(j.id) for j in fine], str(broken.id)
'''


Run = Callable[[str], subprocess.CompletedProcess[str]]


@pytest.fixture
def run(pg_dsn: str, prefix: str) -> Iterator[Run]:
    """``run(script)``: the script after :data:`DRAIN`, in a fresh interpreter on the
    test's prefix; the completed process (it must exit 0)."""
    def go(script: str) -> subprocess.CompletedProcess[str]:
        code = DRAIN + textwrap.dedent(script)
        env = {**os.environ, "DSN": pg_dsn, "PREFIX": prefix, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=120, check=False)
        assert done.returncode == 0, (done.stdout, done.stderr)
        return done
    yield go
    asyncio.run(drop_prefix(pg_dsn, prefix))


def test_a_process_that_configures_nothing_sees_warnings_only(run: Run) -> None:
    done = run('''
        import logging
        import structlog

        before = structlog.get_config()
        root = logging.getLogger()

        def untouched(where):
            assert not structlog.is_configured() and structlog.get_config() == before, where
            assert (root.level, root.handlers) == (logging.WARNING, []), where
            venturi_logger = logging.getLogger("venturi")
            assert (venturi_logger.level, venturi_logger.handlers) == (logging.NOTSET, []), where

        untouched("import venturi")
        fine, broken = asyncio.run(drain(untouched))
        print(broken)
    ''')
    broken = done.stdout.strip()
    assert len(broken) == 36, done.stdout  # stdout carries the job id and nothing else
    # The last-resort handler prints a record's message: one line per event, its name
    # first. Only the warnings of the failed job arrive (and a stall warning, should this
    # shared machine pause the event loop); none of the info or per-job debug events.
    lines = done.stderr.splitlines()
    names = [line.split()[0] for line in lines if not line.startswith("event_loop_stalled")]
    assert names == ["job_failed", "job_dead"], done.stderr
    assert lines[0].startswith(f"job_failed job_id={broken} kind=log.broken run_no=1 ")
    assert "error=RuntimeError" in lines[0] and "RuntimeError: boom" in lines[0]


def test_basic_config_at_debug_gets_every_event_with_its_fields(run: Run) -> None:
    done = run('''
        import logging

        logging.basicConfig(level=logging.DEBUG,
                            format="%(levelname)s %(name)s %(message)s")
        kept = []
        class Keep(logging.Handler):
            def emit(self, record):
                if record.name.startswith("venturi"):
                    kept.append(record)
        logging.getLogger().addHandler(Keep())

        fine, broken = asyncio.run(drain())
        by_event = {}
        for record in kept:
            assert record.name == "venturi.worker" and isinstance(record.msg, dict)
            # The caller is venturi's code that logged, not the logging plumbing.
            assert "venturi/worker/" in record.pathname, record.pathname
            by_event.setdefault(record.msg["event"], []).append(record)

        # venturi.worker is enabled for DEBUG: the per-job events are emitted.
        claimed = sorted(r.msg["job_id"] for r in by_event["job_claimed"])
        assert claimed == sorted([*fine, broken]), claimed
        completed = by_event["job_completed"]
        assert sorted(r.msg["job_id"] for r in completed) == sorted(fine)
        assert completed[0].levelname == "DEBUG"
        assert completed[0].msg == {"job_id": completed[0].msg["job_id"], "kind": "log.fine",
                                    "run_no": 1, "event": "job_completed"}
        (started,) = by_event["worker_started"]
        assert started.levelname == "INFO" and started.msg["concurrency"] == 2
        assert started.msg["kinds"] == ["log.broken", "log.fine"]
        (failed,) = by_event["job_failed"]
        assert failed.levelname == "WARNING" and failed.msg["job_id"] == broken
        assert failed.msg["error"] == "RuntimeError"
        assert failed.msg["traceback"].endswith("RuntimeError: boom")
        print(fine[0])
    ''')
    job = done.stdout.strip()
    assert f"DEBUG venturi.worker job_completed job_id={job} kind=log.fine run_no=1" \
        in done.stderr.splitlines()


def test_dict_config_routes_venturi_to_its_handler_at_its_level(
        run: Run, tmp_path: Path) -> None:
    log_file = tmp_path / "venturi.log"
    done = run(f'''
        import logging, logging.config

        kept = []
        class Keep(logging.Handler):
            def emit(self, record):
                kept.append(record)

        # As Django's LOGGING does, after venturi is imported (so its loggers exist:
        # disable_existing_loggers keeps the children of a configured logger).
        logging.config.dictConfig({{
            "version": 1,
            "formatters": {{"plain": {{"format": "%(levelname)s|%(name)s|%(message)s"}}}},
            "handlers": {{
                "file": {{"class": "logging.FileHandler", "filename": {str(log_file)!r},
                         "formatter": "plain"}},
                "keep": {{"()": Keep}},
            }},
            "loggers": {{"venturi": {{"level": "INFO", "handlers": ["file", "keep"],
                                     "propagate": False}}}},
        }})
        fine, broken = asyncio.run(drain())
        events = [r.msg["event"] for r in kept]
        # INFO: no per-job debug events were even built.
        assert "job_claimed" not in events and "job_completed" not in events, events
        assert events[0] == "worker_started" and events[-1] == "worker_stopped", events
        (dead,) = [r for r in kept if r.msg["event"] == "job_dead"]
        assert dead.msg["job_id"] == broken and dead.msg["kind"] == "log.broken"
        (stopped,) = [r for r in kept if r.msg["event"] == "worker_stopped"]
        assert (stopped.msg["completed"], stopped.msg["dead"]) == (2, 1)
    ''')
    assert done.stderr == ""  # propagate=False: nothing reached the last-resort handler
    lines = log_file.read_text().splitlines()
    assert lines[0].startswith("INFO|venturi.worker|worker_started worker=")
    assert any(line.startswith("WARNING|venturi.worker|job_dead job_id=") for line in lines)


def test_structlog_routed_through_logging_shapes_venturi_events_too(run: Run) -> None:
    """An application on structlog's standard-library recipe: venturi's events pass
    through its processors (here a timestamp and the level) into its JSON handler."""
    done = run('''
        import json, logging, sys
        import structlog

        structlog.configure(
            processors=[structlog.processors.add_log_level,
                        structlog.processors.TimeStamper(fmt="iso"),
                        structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
            logger_factory=structlog.stdlib.LoggerFactory())
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.add_logger_name,
                        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        structlog.processors.JSONRenderer()]))
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(logging.INFO)
        asyncio.run(drain())
    ''')
    events = [json.loads(line) for line in done.stdout.splitlines()]
    (started,) = [e for e in events if e["event"] == "worker_started"]
    assert started["level"] == "info" and started["logger"] == "venturi.worker"
    assert "timestamp" in started and started["concurrency"] == 2
    assert {e["event"] for e in events} >= {"job_failed", "job_dead", "worker_stopped"}


@pytest.fixture
def worker_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("venturi.worker")
    saved = logger.level
    yield logger
    logger.setLevel(saved)


class Noop(venturi.Task, kind="log.noop"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO])
async def test_per_job_events_are_on_iff_venturi_worker_is_enabled_for_debug(
        level: int, worker_logger: logging.Logger) -> None:
    """The worker decides at run start whether to build per-job events, from the level
    of the stdlib logger ``venturi.worker``."""
    worker_logger.setLevel(level)
    queue = venturi.Queue(venturi.MemoryStore())
    job = await queue.enqueue(Noop())
    with capture_logs() as logs:
        await venturi.Worker(queue, tasks=[Noop], concurrency=1).run(until_empty=True)
    names = [e["event"] for e in logs]
    assert "worker_started" in names and "worker_stopped" in names
    per_job = [e for e in logs if e["event"] in ("job_claimed", "job_completed")]
    if level == logging.DEBUG:
        assert [(e["event"], e["job_id"], e["log_level"]) for e in per_job] == [
            ("job_claimed", str(job.id), "debug"), ("job_completed", str(job.id), "debug")]
    else:
        assert per_job == []


def test_capture_logs_sees_venturi_events_at_the_levels_logging_allows(
        worker_logger: logging.Logger) -> None:
    log = get_logger("venturi.worker")
    worker_logger.setLevel(logging.INFO)
    assert log.is_enabled_for(logging.INFO) and not log.is_enabled_for(logging.DEBUG)
    with capture_logs() as logs:
        log.debug("hidden", n=1)
        log.info("shown", n=2)
    assert logs == [{"n": 2, "event": "shown", "log_level": "info"}]


@pytest.fixture
def structlog_restored() -> Iterator[None]:
    configured, saved = structlog.is_configured(), structlog.get_config()
    yield
    if configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()


@pytest.mark.usefixtures("structlog_restored")
def test_records_stay_dicts_after_a_capture_ends(worker_logger: logging.Logger) -> None:
    """capture_logs leaves structlog "configured" with its defaults (printing to
    stdout): that says nothing about the application's logging, and records keep
    their dict."""
    with capture_logs():
        pass
    assert structlog.is_configured()
    kept: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = kept.append  # type: ignore[method-assign]
    worker_logger.addHandler(handler)
    worker_logger.setLevel(logging.INFO)
    try:
        get_logger("venturi.worker").info("job_retried", job_id="j1", retry_in=1.5)
    finally:
        worker_logger.removeHandler(handler)
    (record,) = kept
    assert record.msg == {"job_id": "j1", "retry_in": 1.5, "event": "job_retried"}
    assert record.getMessage() == "job_retried job_id=j1 retry_in=1.5"


def test_an_event_as_text_is_one_line() -> None:
    event = Event(job_id="j1", note="two words", kinds=["a", "b"], empty="",
                  traceback="Traceback:\n  boom", event="job_failed")
    assert str(event) == ("job_failed job_id=j1 note='two words' kinds=['a', 'b'] empty='' "
                          "traceback='Traceback:\\n  boom'")


def test_the_log_cost_benchmark_runs_and_leaves_logging_as_it_was() -> None:
    """Not a timed test: ``python -m benchmarks.logcost`` keeps working."""
    from benchmarks.logcost import measure

    root = logging.getLogger()
    before = (root.level, root.handlers[:], structlog.is_configured())
    figures = measure(number=100)
    assert len(figures) == 5 and all(ns > 0 for ns in figures.values())
    assert (root.level, root.handlers, structlog.is_configured()) == before


def _logged() -> tuple[set[tuple[str, str]], set[str]]:
    """Every (level, event) venturi's code logs, and every logger it gets, read off the
    source: ``log.<level>("<event>"`` and ``get_logger("<name>")``."""
    events: set[tuple[str, str]] = set()
    loggers: set[str] = set()
    for path in [*(ROOT / "venturi").rglob("*.py"), *(ROOT / "cli").rglob("*.py")]:
        text = path.read_text()
        events.update((level.upper(), name) for level, name in re.findall(
            r'\blog\.(debug|info|warning|error)\(\s*"(\w+)"', text))
        loggers.update(re.findall(r'get_logger\("(venturi[\w.]*)"\)', text))
    return events, loggers


def test_every_event_and_logger_is_listed_on_the_logging_page() -> None:
    """docs/operations/logging.md's tables are what an operator filters and alerts on:
    an event or a logger the code gained and the page did not is a regression."""
    page = (ROOT / "docs" / "operations" / "logging.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip() in (
                "DEBUG", "INFO", "WARNING", "ERROR")}
    events, loggers = _logged()
    assert len(events) > 50 and "venturi.worker" in loggers  # the source was read
    missing = sorted(f"{level} {name}" for level, name in events
                     if f"`{name}`" not in rows.get(level, ""))
    assert not missing, f"events missing from their level's row in logging.md: {missing}"
    unlisted = sorted(name for name in loggers if f"| `{name}` |" not in page)
    assert not unlisted, f"loggers missing from logging.md's table: {unlisted}"
