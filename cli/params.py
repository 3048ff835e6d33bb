"""Option values that need more than Typer's types: durations, priorities,
statuses, ids, kind lists, retention rules, the prefetch window. A bad value is a
usage error naming the option (exit 2), raised before anything touches the database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal
from uuid import UUID

import orjson

import venturi
from venturi.config import parse_duration

from .session import USAGE, fail


def duration(value: str, option: str) -> timedelta:
    try:
        return parse_duration(value, what=option)
    except venturi.ConfigError as exc:
        fail(str(exc), code=USAGE)


def optional_duration(value: str | None, option: str) -> timedelta | None:
    return None if value is None else duration(value, option)


def uuid_value(value: str, option: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        fail(f"{option}: {value!r} is not a UUID", code=USAGE)


def priority(value: str | None, option: str = "--priority") -> venturi.Priority | None:
    if value is None:
        return None
    try:
        return venturi.Priority.parse(value)
    except venturi.ConfigError as exc:
        fail(f"{option}: {exc}", code=USAGE)


def status(value: str | None, option: str = "--status",
           allowed: tuple[venturi.Status, ...] = tuple(venturi.Status)) -> venturi.Status | None:
    if value is None:
        return None
    try:
        parsed = venturi.Status(value.strip().lower())
    except ValueError:
        parsed = None
    if parsed not in allowed:
        choices = ", ".join(s.value for s in allowed)
        fail(f"{option}: {value!r} is not one of {choices}", code=USAGE)
    return parsed


def kinds(value: str | None, option: str = "--kinds") -> list[str] | None:
    """``embed,summarize`` -> ["embed", "summarize"]; None when not given."""
    if value is None:
        return None
    names = [k.strip() for k in value.split(",") if k.strip()]
    if not names:
        fail(f"{option}: give at least one kind (comma-separated)", code=USAGE)
    return list(dict.fromkeys(names))


def retention(value: str | None, option: str = "--retention") -> dict[str, timedelta] | None:
    """``completed=1d,dead=7d`` -> {"completed": 1 day, "dead": 7 days}."""
    if value is None:
        return None
    rules: dict[str, timedelta] = {}
    for part in value.split(","):
        name, sep, age = part.strip().partition("=")
        name = name.strip().lower()
        if not sep or name not in ("completed", "dead"):
            fail(f"{option}: {part.strip()!r} is not STATUS=AGE with STATUS completed or dead "
                 "(e.g. completed=1d,dead=7d)", code=USAGE)
        rules[name] = duration(age, f"{option} {name}")
    return rules


def prefetch(value: str, option: str = "--prefetch") -> int | Literal["auto"]:
    """``auto`` or a number of jobs, 0..10000."""
    text = value.strip().lower()
    if text == "auto":
        return "auto"
    if not text.isdigit() or int(text) > 10_000:
        fail(f"{option}: {value!r} is not auto or a number of jobs in 0..10000", code=USAGE)
    return int(text)


def gc_threshold(value: str, option: str = "--gc-threshold") -> int | None:
    """A young-generation threshold, 1..10000000, or 0 / off: leave the collector alone."""
    text = value.strip().lower()
    if text in ("0", "off"):
        return None
    if not text.isdigit() or int(text) > 10_000_000:
        fail(f"{option}: {value!r} is not off or a threshold in 1..10000000", code=USAGE)
    return int(text)


def json_object(value: str, option: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        fail(f"{option}: not valid JSON ({str(exc).splitlines()[0]})", code=USAGE)
    if not isinstance(parsed, dict):
        fail(f"{option}: must be a JSON object, e.g. '{{\"uri\": \"file:///a\"}}'", code=USAGE)
    return parsed
