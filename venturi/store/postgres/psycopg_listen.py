"""A blocking LISTEN session for ``SyncQueue.result``: one psycopg connection of its
own (autocommit; a pool's reset would unlisten), notifications read with a deadline.
A SyncQueue's listener thread holds one for all of its pending calls
(``thread_results.ThreadWaiters``).

Only the results channel is listened to here: workers, which need the others, run on
the asyncio store (docs/concepts/results.md).
"""

from __future__ import annotations

from typing import Any

import psycopg

from .._sql import Query
from .psycopg_errors import translated


class BlockingListener:
    """``with BlockingListener(dsn, prefix, listen) as listener: listener.wait(5)``, where
    ``listen`` is the LISTEN statement (``listen_results``). Driver errors come out
    translated (a lost connection is ``DatabaseUnavailable``)."""

    def __init__(self, dsn: str, prefix: str, listen: Query) -> None:
        self._dsn = dsn
        self._prefix = prefix
        self._listen = listen
        self._conn: psycopg.Connection[Any] | None = None

    def __enter__(self) -> BlockingListener:
        with translated(self._prefix, self._dsn):
            self._conn = psycopg.connect(self._dsn, autocommit=True,
                                         fallback_application_name="venturi listen")
            self._conn.execute(self._listen.sql)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def wait(self, timeout: float) -> list[str]:
        """The payloads of the notifications that arrive within ``timeout`` seconds:
        returns at the first one (with any already queued behind it), or empty."""
        assert self._conn is not None, "use the listener as a context manager"
        with translated(self._prefix, self._dsn):
            return [n.payload for n in
                    self._conn.notifies(timeout=max(timeout, 0.0), stop_after=1)]
