"""The raw asyncpg references for the worker scenarios: what a minimal hand-written
consumer does, on a table of the same shape (a migrated prefix), without a journal.

Claim: one ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)`` statement over the
same partial index venturi's claim uses (``status = 'pending'``, ordered by
``priority, visible_at, id``), setting the same columns (owner, lease, run count).
Done: one ``UPDATE`` of the claimed ids. Each statement is its own transaction,
committed with the server's default durability.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import asyncpg
import orjson

from .tasks import KIND

CLAIM = """
WITH picked AS (
    SELECT id FROM {p}jobs
    WHERE status = 'pending' AND priority = 1 AND visible_at <= now() AND kind = ANY($1::text[])
    ORDER BY priority, visible_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
)
UPDATE {p}jobs AS j SET status = 'claimed', claimed_by = $3, run_count = j.run_count + 1,
                        claim_expires_at = now() + interval '30 seconds'
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.payload
"""
DONE = """
UPDATE {p}jobs SET status = 'completed', finished_at = now(), claimed_by = NULL,
                   claim_expires_at = NULL
WHERE id = ANY($1::uuid[])
"""
INSERT_NOTIFY = """
WITH ins AS (
    INSERT INTO {p}jobs (id, kind, payload, priority, max_failures)
    VALUES ($1, $2, $3::jsonb, 1, 25) RETURNING kind
)
SELECT pg_notify('{p}jobs', kind) FROM ins
"""


async def drain_on(conn: asyncpg.Connection, prefix: str, batch: int,
                   kind: str = KIND) -> int:
    """Claim ``batch`` rows per statement and mark them done until none is left."""
    claim, done = CLAIM.format(p=prefix), DONE.format(p=prefix)
    total = 0
    while True:
        rows = await conn.fetch(claim, [kind], batch, "raw/1")
        if not rows:
            return total
        for r in rows:
            orjson.loads(r[1])  # a handler needs its payload decoded
        await conn.execute(done, [r[0] for r in rows])
        total += len(rows)


async def raw_drain(dsn: str, prefix: str, batch: int) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return await drain_on(conn, prefix, batch)
    finally:
        await conn.close()


class RawConsumer:
    """A LISTEN connection and a claim loop: wakes on a notification, claims up to
    100 rows, calls ``started(payload)`` for each, marks them done."""

    def __init__(self, dsn: str, prefix: str, started: Callable[[Any], None]) -> None:
        self.dsn, self.prefix, self.started = dsn, prefix, started
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RawConsumer:
        self._listen = await asyncpg.connect(self.dsn)
        self._conn = await asyncpg.connect(self.dsn)
        await self._listen.add_listener(f"{self.prefix}jobs", lambda *_: self._wake.set())
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        claim, done = CLAIM.format(p=self.prefix), DONE.format(p=self.prefix)
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                rows = await self._conn.fetch(claim, [KIND], 100, "raw/1")
                if not rows:
                    break
                for r in rows:
                    self.started(orjson.loads(r[1]))
                await self._conn.execute(done, [r[0] for r in rows])

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._listen.close()
        await self._conn.close()
