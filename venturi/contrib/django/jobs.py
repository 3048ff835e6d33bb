"""How a Django task call is stored as a venturi job: its kind, tier and payload.

One venturi kind per Django queue (``django:<queue_name>``): a worker serves
queues as Django's own workers do, and runs any task function the payload names.
The job's subject is the function's dotted path, so ``venturi jobs``, ``venturi
count --subject`` and ``venturi cancel --subject`` work per function. The payload
keeps what Django's ``TaskResult.task`` is rebuilt from: the function's path,
the arguments, and the ``priority`` and ``run_after`` the call was made with.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ...task import Priority

KIND_PREFIX = "django:"
MAX_QUEUE_NAME = 200 - len(KIND_PREFIX)


def kind_for(queue_name: str) -> str:
    """The venturi kind of a Django queue."""
    return KIND_PREFIX + queue_name


def queue_of(kind: str) -> str | None:
    """The Django queue of a venturi kind, or None for a kind that is not one."""
    return kind[len(KIND_PREFIX):] if kind.startswith(KIND_PREFIX) else None


def queue_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a venturi queue (None when it can)."""
    if not isinstance(name, str) or not name or name != name.strip() or not name.isprintable():
        return (f"queue name {name!r} must be a non-empty printable string without "
                "surrounding spaces")
    if len(name) > MAX_QUEUE_NAME:
        return f"queue name {name[:20]!r}... is longer than {MAX_QUEUE_NAME} characters"
    return None


def tier(priority: int) -> Priority:
    """Django's priority (-100..100, larger runs sooner) as one of venturi's three
    claim tiers: above 0 HIGH, 0 NORMAL, below 0 LOW (docs/concepts/priorities.md)."""
    if priority > 0:
        return Priority.HIGH
    return Priority.NORMAL if priority == 0 else Priority.LOW


def payload(func: str, args: list[Any], kwargs: dict[str, Any], priority: int,
            run_after: dt.datetime | None) -> dict[str, Any]:
    """The job's payload: what the worker calls, and what ``TaskResult.task`` is
    rebuilt from (the worker's Task class declares the same fields)."""
    return {"func": func, "args": args, "kwargs": kwargs, "priority": int(priority),
            "run_after": run_after}
