"""The cancel scope around one run of a handler.

The executor needs of a scope what anyio's ``CancelScope`` gives: ``cancel()`` from
anywhere (the deadline watcher, a lost lease, a release), a ``cancel_called`` to read
afterwards, the run's own ``CancelledError`` absorbed at the scope's end and any other
cancellation (the worker stopping its slots) let through. And it keeps cancelling:
until the run leaves the scope, every await it reaches is cancelled, so a handler that
catches one ``CancelledError`` and goes on meets the next, as in an anyio scope
(docs/concepts/leases.md, "A stopped run stays stopped"). Entering and leaving one of
anyio's costs 2.4-4.7 µs here, this one 0.9-1.5 µs, of the 30-50 µs of the worker's CPU
a no-op job costs in all (``python -m benchmarks.scopecost``;
benchmarks/results-throughput.md, "The run's cancel scope").

Cancellation works through the task's own counter (``Task.cancel``,
``Task.uncancel``, ``Task.cancelling``), as ``asyncio.timeout`` does: the scope
records the count on entry, and on exit takes back the requests it made; a
``CancelledError`` is the scope's own when no other request is left.

A handler may protect its cleanup with ``anyio.CancelScope(shield=True)``, as it could
inside anyio's scope: no request is made while the run is inside a shielded anyio
scope it entered. That is read from anyio's record of the task's scopes (private: its
innermost scope on entering, the scopes entered since once the run is cancelled).
Should a later anyio change it, a shield no longer holds the requests back, and
tests/worker/test_runscope.py says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Any


def _anyio_task_states() -> Mapping[Any, Any]:
    """anyio's scopes per task, by task (empty if a later anyio keeps them elsewhere)."""
    try:
        from anyio._backends import _asyncio
        states: Mapping[Any, Any] = _asyncio._task_states
    except (ImportError, AttributeError):  # pragma: no cover - see the module doc
        return {}
    return states


_task_states = _anyio_task_states()
# How often a stopped run inside a shielded anyio scope is looked at again, seconds:
# not at every turn of the loop, which would keep it from ever sleeping meanwhile.
SHIELD_POLL = 0.01


class RunScope:
    __slots__ = ("_anyio_scope", "_entered_with", "_inside", "_sent", "_task", "cancel_called")

    def __init__(self) -> None:
        self.cancel_called = False
        self._inside = False
        self._sent = 0  # cancel requests made to the task, taken back on exit

    def __enter__(self) -> RunScope:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a RunScope must be entered inside a task")
        self._task = task
        self._entered_with = task.cancelling()
        state = _task_states.get(task)
        self._anyio_scope = None if state is None else state.cancel_scope
        self._inside = True
        return self

    def cancel(self) -> None:
        """Stop the run at its next await, and at every await after that until it leaves
        the scope. Never synchronously: a run cancelling its own scope is stopped at its
        next await, not in the middle of the statement that asked."""
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._inside:
            asyncio.get_running_loop().call_soon(self._deliver)

    def _deliver(self) -> None:
        # Runs only while the task is suspended (the loop runs one callback at a time):
        # the request is met at the await it is suspended in, inside the scope.
        if not self._inside:
            return
        loop = asyncio.get_running_loop()
        if self._shielded():  # held back for as long as the shield lasts
            loop.call_later(SHIELD_POLL, self._deliver)
            return
        self._task.cancel()
        self._sent += 1
        loop.call_soon(self._deliver)

    def _shielded(self) -> bool:
        """Whether the run is inside a shielded anyio scope it entered itself."""
        state = _task_states.get(self._task)
        scope: Any = None if state is None else state.cancel_scope
        try:
            while scope is not None and scope is not self._anyio_scope:
                if scope._shield:
                    return True
                scope = scope._parent_scope
        except AttributeError:  # pragma: no cover - a later anyio; see the module doc
            return False
        return False

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self._inside = False
        if not self._sent:
            return False
        task = self._task
        for _ in range(self._sent):
            task.uncancel()
        self._sent = 0
        return kind is not None and issubclass(kind, asyncio.CancelledError) \
            and task.cancelling() <= self._entered_with
