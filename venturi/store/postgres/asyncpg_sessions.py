"""The asyncpg sessions that are never pooled: LISTEN, the worker's identity lock, and
the queue's own vacuum.

Each holds a dedicated connection for as long as it lives: a pool's reset would
run ``UNLISTEN *``, a session advisory lock must outlive transactions (and
would be carried back into the pool, or lost in a pooler), and VACUUM cannot run
inside a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import DatabaseUnavailable
from .. import _connect
from .._sql import Query, listen
from ..base import IdentityLock, Listener, Maintenance
from ..vacuum import MaintenanceState, VacuumPolicy, VacuumRun
from .asyncpg_errors import translated
from .driver import channels as queue_channels
from .vacuum import vacuum_if_needed


class AsyncpgIdentityLock(IdentityLock):
    """A session advisory lock (docs/concepts/leases.md, boot recovery), taken by
    ``query`` on a dedicated connection."""

    def __init__(self, dsn: str, prefix: str, query: Query, args: Sequence[Any],
                 reclaim: Query | None = None, *, role: str = "lock") -> None:
        self._dsn = dsn
        self._role = role
        self._prefix = prefix
        self._query = query
        self._args = tuple(args)
        self._reclaim = reclaim
        self._conn: Any = None
        self._holder: int | None = None  # backend pid of the session that took the lock
        self.lost = asyncio.Event()

    async def __aenter__(self) -> AsyncpgIdentityLock:
        return self

    async def acquire(self) -> bool:
        await self._close()
        self.lost = asyncio.Event()
        lost = self.lost
        with translated(self._prefix, self._dsn):
            self._conn = await _connect.connect(
                self._dsn, timeout=10, statement_cache_size=0,
                server_settings=_connect.named(self._dsn, self._role))
            self._conn.add_termination_listener(lambda _c: lost.set())
            await _connect.server_aware(self._conn)
            got: bool = await self._conn.fetchval(self._query.sql, *self._args)
            if not got and await self._reclaimed():
                for _ in range(50):  # the ended session lets go as it exits
                    await asyncio.sleep(0.1)
                    got = await self._conn.fetchval(self._query.sql, *self._args)
                    if got:
                        break
        if not got:
            await self._close()
            return False
        self._holder = self._conn.get_server_pid()
        return True

    async def _reclaimed(self) -> bool:
        """After a partition the server may still hold the lock for our own earlier
        session, whose client end is gone: end that session (ours, holding this lock)."""
        if self._reclaim is None or self._holder is None:
            return False
        return bool(await self._conn.fetchval(self._reclaim.sql, self._holder, *self._args))

    async def ping(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            with translated(self._prefix, self._dsn):
                async with asyncio.timeout(5):  # wait_for may drop a cancel on 3.11
                    await conn.fetchval("SELECT 1")
        except DatabaseUnavailable:
            self.lost.set()

    async def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await conn.close()
            conn.terminate()

    async def __aexit__(self, *exc: object) -> None:
        await self._close()


class AsyncpgListener(Listener):
    """LISTEN on a dedicated connection; a notification is only a hint (the claim
    decides what runs), a lost connection ends ``receive`` with ``DatabaseUnavailable``."""

    def __init__(self, dsn: str, prefix: str, channels: Mapping[str, str] | None = None) -> None:
        self._dsn = dsn
        self._prefix = prefix
        self._channels = dict(queue_channels(prefix) if channels is None else channels)
        self._queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        self._conn: Any = None
        first = next(iter(self._channels), None)
        self._ping = "SELECT 1" if first is None else listen(first)

    async def __aenter__(self) -> AsyncpgListener:
        with translated(self._prefix, self._dsn):
            self._conn = await _connect.connect(
                self._dsn, timeout=10, statement_cache_size=0,
                server_settings=_connect.named(self._dsn, "listen"))
            self._conn.add_termination_listener(lambda _c: self._queue.put_nowait(None))
            await _connect.server_aware(self._conn)
            for channel, label in self._channels.items():
                await self._conn.add_listener(channel, self._callback(label))
        return self

    def _callback(self, label: str) -> Any:
        def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            if not self._arrived(label, payload):  # the on_arrival hook, if set
                self._queue.put_nowait((label, payload))
        return on_notify

    async def __aexit__(self, *exc: object) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._conn.close()
            self._conn.terminate()

    async def receive(self) -> tuple[str, str]:
        item = await self._queue.get()
        if item is None:
            raise DatabaseUnavailable("listen connection lost")
        return item

    async def ping(self) -> None:
        """Round-trip on the LISTEN connection, so a silently dead socket is noticed.
        The round trip LISTENs again on a channel the session already listens on, a
        no-op for the server: the session's ``query`` in ``pg_stat_activity`` keeps
        reading ``LISTEN ...``, which is how an operator (or a fault test) whose DSN
        names every session alike tells the LISTEN session apart."""
        with translated(self._prefix, self._dsn):
            async with asyncio.timeout(5):  # wait_for may drop a cancel on 3.11
                await self._conn.execute(self._ping)


class AsyncpgMaintenance(Maintenance):
    """venturi.maintenance's guarded VACUUM on a dedicated connection, opened on first
    use and again after it was lost (docs/operations/maintenance.md)."""

    def __init__(self, dsn: str, prefix: str, schema: str | None) -> None:
        self._dsn = dsn
        self._prefix = prefix
        self._schema = schema
        self._conn: Any = None

    async def __aenter__(self) -> AsyncpgMaintenance:
        return self

    async def vacuum(self, policy: VacuumPolicy, state: MaintenanceState) -> list[VacuumRun]:
        if self._conn is None or self._conn.is_closed():
            with translated(self._prefix, self._dsn):
                self._conn = await _connect.connect(
                    self._dsn, timeout=10, statement_cache_size=0,
                    server_settings=_connect.named(self._dsn, "maintenance"))
        try:
            return await vacuum_if_needed(self._conn, self._prefix, policy,
                                          schema=self._schema, state=state)
        except BaseException:
            # Whatever cut the look short may also have kept its try-lock from being
            # released: ending the session releases it.
            await self._close()
            raise

    async def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await conn.close()
            conn.terminate()

    async def __aexit__(self, *exc: object) -> None:
        await self._close()
