"""Helpers for tests of ``SyncQueue.result`` (tests/producers/test_sync_results.py,
tests/test_pooler.py): a call waiting in a thread of its own, a real worker run, and
conditions waited on with a deadline."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg

import venturi
from venturi import Queue, SyncQueue


def until(condition: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """``condition()`` once it is true; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.01)
    return value


def work(dsn: str, prefix: str, *tasks: type[venturi.Task]) -> None:
    """A real worker, in this thread, until none of ``tasks``' jobs is left to run."""

    async def run() -> None:
        async with Queue.connect(dsn, prefix=prefix) as queue:
            await venturi.Worker(queue, tasks=list(tasks)).run(until_empty=True)

    asyncio.run(run())


def awaited(dsn: str, prefix: str, ids: list[UUID]) -> int:
    """How many of ``ids`` a result() call has read and flagged (sql/0009_awaited.sql)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM {prefix}jobs WHERE awaited AND id = ANY(%s)",
                           (ids,)).fetchone()
    assert row is not None
    return int(row[0])


class Waiting:
    """``sync.result(id, timeout=...)`` in a thread of its own: its value or its error."""

    def __init__(self, sync: SyncQueue, id: UUID, timeout: float | None = 30) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(sync, id, timeout), daemon=True)
        self.thread.start()

    def _run(self, sync: SyncQueue, id: UUID, timeout: float | None) -> None:
        try:
            self.value = sync.result(id, timeout=timeout)
        except BaseException as exc:
            self.error = exc

    def outcome(self, timeout: float = 30) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "result() did not return"
        if self.error is not None:
            raise self.error
        return self.value
