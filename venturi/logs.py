"""How venturi logs (:func:`get_logger`), and how the processes venturi runs render
logs (:func:`configure`, for the CLI).

venturi is a library first: its events are records of the standard-library loggers
named ``venturi.*``, so the application decides where they go and at which level
(docs/operations/logging.md). An application that configures nothing sees warnings
and errors only (Python's last-resort handler), and nothing here configures
anything on import.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any, Literal

import structlog

LogFormat = Literal["auto", "json", "console"]

DEBUG, INFO, WARNING, ERROR, CRITICAL = (
    logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)


class Event(dict[str, Any]):
    """The ``msg`` of a venturi ``LogRecord``: the event's fields, with ``event`` (its
    stable name) after them, as structlog orders an event dict. As text (a plain
    ``%(message)s`` format) it is one line: the name, then ``key=value`` pairs."""

    __slots__ = ()

    def __str__(self) -> str:
        pairs = (f"{key}={_text(value)}" for key, value in self.items() if key != "event")
        return " ".join((str(self.get("event")), *pairs))


def _text(value: object) -> str:
    if isinstance(value, str) and value and not any(
            c.isspace() or c in "\"'=\\" for c in value):
        return value
    return repr(value)


class Logger:
    """structlog-style calls, ``log.info("job_retried", job_id=..., kind=...)``, on the
    standard-library logger of the same name.

    The level is checked first, with the stdlib logger's own cached check: a disabled
    event costs a method call and a dict lookup, before any processor runs or any
    record is built (``python -m benchmarks.logcost``). An enabled event becomes a
    ``LogRecord`` whose ``msg`` is an :class:`Event`, marked the way structlog's
    ``ProcessorFormatter`` recognises its own events. If the process routes structlog
    through the standard library, or a test captures events with
    ``structlog.testing.capture_logs``, structlog's processors shape the event first,
    exactly as for the application's own structlog loggers.
    """

    __slots__ = ("_logger",)

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def is_enabled_for(self, level: int) -> bool:
        return self._logger.isEnabledFor(level)

    def debug(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(DEBUG):
            self._emit(DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(INFO):
            self._emit(INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(WARNING):
            self._emit(WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(ERROR):
            self._emit(ERROR, "error", event, fields)

    def critical(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(CRITICAL):
            self._emit(CRITICAL, "critical", event, fields)

    def _emit(self, level: int, method: str, event: str, fields: dict[str, Any]) -> None:
        chain = _application_chain()
        if chain is not None:
            bound = structlog.stdlib.BoundLogger(self._logger, chain, {})
            try:
                args, kw = bound._process_event(method, event, fields)
            except structlog.DropEvent:
                return
        else:
            fields["event"] = event
            args, kw = structlog.stdlib.ProcessorFormatter.wrap_for_formatter(
                self._logger, method, Event(fields))
        # The record's caller (funcName, lineno) is venturi's code, not this module.
        self._logger.log(level, *args, **{"stacklevel": 3, **kw})


def _application_chain() -> list[structlog.types.Processor] | None:
    """The process's structlog processors, if venturi's events are to pass through them:
    structlog configured to log through the standard library (its stdlib recipe, as
    :func:`configure` does), or a test capturing events (``capture_logs``). Not
    structlog's built-in defaults, nor a configuration that prints to stdout: those
    say nothing about where the application wants its ``logging`` records."""
    if not structlog.is_configured():
        return None
    config = structlog.get_config()
    processors: list[structlog.types.Processor] = config["processors"]
    if isinstance(config["logger_factory"], structlog.stdlib.LoggerFactory) or any(
            isinstance(p, structlog.testing.LogCapture) for p in processors):
        return processors
    return None


def get_logger(name: str) -> Logger:
    """The logger of one area of venturi (``get_logger("venturi.worker")``)."""
    return Logger(name)


class _Saved:
    """What :func:`configure` changed, for :func:`reset` to put back."""

    def __init__(self) -> None:
        root = logging.getLogger()
        self.root_level = root.level
        self.root_handlers = root.handlers[:]
        self.venturi_level = logging.getLogger("venturi").level
        self.logger_class = logging.getLoggerClass()
        self.structlog = structlog.get_config() if structlog.is_configured() else None


_saved: _Saved | None = None


def configure(format: LogFormat = "auto", level: str | int = "info",
              stream: IO[str] | None = None) -> str:
    """Render every log line of this process on ``stream`` (stdout): venturi's events,
    structlog events of the tasks' own code, and the records of every stdlib logger
    (asyncpg, uvicorn, the tasks' ``logging`` calls, ``warnings``). JSON, one object
    per line with exceptions as a field, when stdout is not a TTY (or ``json``);
    readable lines on a TTY (or ``console``). Returns the format chosen.

    For processes venturi runs (the CLI): it owns the process's logging, replacing the
    root logger's handlers. An application that embeds venturi keeps its own
    configuration instead. :func:`reset` undoes this.

    Tracebacks are rendered without local variables: locals can hold payloads and
    credentials, which must not reach the logs.
    """
    if format == "auto":
        format = "console" if sys.stdout.isatty() else "json"
    numeric = level if isinstance(level, int) else logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    reset()
    global _saved
    _saved = _Saved()

    renderer: list[structlog.types.Processor]
    if format == "json":
        renderer = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)),
            structlog.processors.JSONRenderer(),
        ]
    else:
        renderer = [structlog.dev.ConsoleRenderer(
            colors=sys.stdout.isatty(), exception_formatter=structlog.dev.plain_traceback)]
    formatter = structlog.stdlib.ProcessorFormatter(
        # Records of other libraries say whose they are; venturi's events keep the
        # fields they always had.
        foreign_pre_chain=[structlog.stdlib.add_logger_name],
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stdout if stream is None else stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    logging.getLogger("venturi").setLevel(logging.NOTSET)  # --log-level decides
    logging.captureWarnings(True)
    structlog.configure(
        processors=[structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    return format


def reset() -> None:
    """Undo :func:`configure` (CLI tests run many commands in one process)."""
    global _saved
    saved, _saved = _saved, None
    if saved is None:
        return
    root = logging.getLogger()
    for handler in root.handlers:
        if handler not in saved.root_handlers:
            handler.close()
    root.handlers = saved.root_handlers
    root.setLevel(saved.root_level)
    logging.getLogger("venturi").setLevel(saved.venturi_level)
    logging.captureWarnings(False)
    logging.setLoggerClass(saved.logger_class)
    if saved.structlog is None:
        structlog.reset_defaults()
    else:
        structlog.configure(**saved.structlog)
