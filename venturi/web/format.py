"""How values read from the queue are written into pages (Jinja filters).

Every filter returns plain text; the templates' autoescaping makes it safe.
None of them marks anything as safe HTML.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import jinja2
import orjson


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def span(seconds: float | None) -> str:
    """A duration the way an operator reads it: 950 ms, 42 s, 3 m 5 s, 2 h 10 m, 4 d 3 h."""
    if seconds is None:
        return "—"
    s = max(seconds, 0.0)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    minutes, sec = divmod(int(s), 60)
    if minutes < 60:
        return f"{minutes} m {sec} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} m"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def duration(value: dt.timedelta | float | None) -> str:
    if isinstance(value, dt.timedelta):
        return span(value.total_seconds())
    return span(value)


def timestamp(value: dt.datetime | None) -> str:
    """UTC, to the second: the same in every browser, whatever its time zone."""
    if value is None:
        return "—"
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: dt.datetime | None) -> str:
    return "" if value is None else value.astimezone(dt.UTC).isoformat()


def relative(value: dt.datetime | None, now: dt.datetime) -> str:
    """``3 m 5 s ago`` or ``in 42 s``."""
    if value is None:
        return "—"
    delta = (now - value).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"{span(delta)} ago" if delta > 0 else f"in {span(-delta)}"


def pretty(value: Any) -> str:
    """Indented JSON of a decoded payload, carry or attachment."""
    if value is None:
        return "null"
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(value)


def number(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def short_id(value: object) -> str:
    """The random tail of a UUIDv7 (its head is the time, shared by neighbours)."""
    text = str(value)
    return "…" + text[-8:]


def install(env: jinja2.Environment) -> None:
    env.filters.update(duration=duration, ts=timestamp, iso=iso, pretty=pretty, num=number,
                       line=one_line, span=span, short=short_id)
    env.globals.update(relative=relative)
