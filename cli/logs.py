"""Log output of ``venturi worker``: structlog as JSON lines off a terminal (for
log shippers) and as readable lines on one. The library only emits events; the
CLI, being the process owner, decides how they are rendered."""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import orjson
import structlog

LogFormat = Literal["json", "console"]


def choose(requested: str | None) -> LogFormat:
    if requested in ("json", "console"):
        return requested  # type: ignore[return-value]
    return "console" if sys.stdout.isatty() else "json"


def _dumps(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def configure(fmt: LogFormat, level: str = "info") -> None:
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if fmt == "json":
        renderer = [structlog.processors.dict_tracebacks,
                    structlog.processors.JSONRenderer(serializer=_dumps)]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())]
    structlog.configure(
        processors=[*shared, *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=False,
    )
