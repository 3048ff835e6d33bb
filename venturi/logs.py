"""structlog setup for processes venturi runs (the CLI calls this; a library
user's application keeps its own logging configuration)."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["auto", "json", "console"]


def configure(format: LogFormat = "auto", level: str | int = "info") -> str:
    """Configure structlog: JSON lines when stdout is not a TTY (or ``json``),
    readable lines on a TTY (or ``console``). Returns the format chosen.

    Tracebacks are rendered without local variables: locals can hold payloads
    and credentials, which must not reach the logs.
    """
    if format == "auto":
        format = "console" if sys.stdout.isatty() else "json"
    numeric = level if isinstance(level, int) else logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    processors: list[structlog.types.Processor]
    if format == "json":
        tracebacks = structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False))
        processors = [*shared, tracebacks, structlog.processors.JSONRenderer()]
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stdout.isatty(),
            exception_formatter=structlog.dev.plain_traceback,
        )
        processors = [*shared, renderer]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=False,
    )
    return format
