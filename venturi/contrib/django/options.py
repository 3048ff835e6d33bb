"""The backend's ``OPTIONS``: one frozen object, validated when Django builds the backend."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.tasks.exceptions import InvalidTaskBackend

from ...config import DEFAULT_PREFIX, validate_prefix
from ...errors import ConfigError
from ...task import DEFAULT_LEASE, DEFAULT_TIMEOUT, check_lease

#: Django tasks have no retries: a raising task function is FAILED after one run.
DEFAULT_MAX_FAILURES = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class BackendOptions:
    """``TASKS[alias]["OPTIONS"]`` (docs/integrations/django.md#options).

    - ``prefix``: the venturi queue (table prefix), ``venturi_`` by default;
    - ``database``: the ``DATABASES`` alias whose connection enqueues, ``default``;
    - ``max_failures``: runs that may fail before a task is FAILED, 1 by default
      (a task may set its own: ``@task(max_failures=3)``);
    - ``lease`` / ``timeout``: seconds (or timedelta) a claim lasts without renewal
      and a run may take, venturi's defaults (10 s, 30 min);
    - ``dsn``: where ``venturi worker --django`` and ``manage.py venturi`` connect,
      when it is not the one derived from ``DATABASES`` (a pooler, another role).
    """

    prefix: str = DEFAULT_PREFIX
    database: str = "default"
    max_failures: int = DEFAULT_MAX_FAILURES
    lease: timedelta = DEFAULT_LEASE
    timeout: timedelta = DEFAULT_TIMEOUT
    dsn: str | None = None

    @classmethod
    def parse(cls, alias: str, raw: Mapping[str, Any]) -> BackendOptions:
        where = f"TASKS[{alias!r}]['OPTIONS']"
        unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
        if unknown:
            raise InvalidTaskBackend(
                f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))}; known: {', '.join(cls.__dataclass_fields__)}")
        values = dict(raw)
        try:
            validate_prefix(values.get("prefix", DEFAULT_PREFIX))
            for name in ("lease", "timeout"):
                if name in values:
                    values[name] = _duration(values[name], f"{where}[{name!r}]")
            check_lease(values.get("lease", DEFAULT_LEASE))
        except ConfigError as exc:
            raise InvalidTaskBackend(f"{where}: {exc}") from None
        if values.get("timeout", DEFAULT_TIMEOUT) <= timedelta(0):
            raise InvalidTaskBackend(f"{where}['timeout'] must be positive")
        problem = max_failures_problem(values.get("max_failures", DEFAULT_MAX_FAILURES))
        if problem:
            raise InvalidTaskBackend(f"{where}['max_failures']: {problem}")
        for name in ("database", "dsn"):
            value = values.get(name, "default" if name == "database" else None)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidTaskBackend(f"{where}[{name!r}] must be a non-empty string")
        return cls(**values)


def max_failures_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"must be an int >= 1, not {value!r}"
    return None


def _duration(value: object, what: str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    raise ConfigError(f"{what} must be seconds or a timedelta, not {value!r}")
