"""Statements on one asyncpg connection: a pooled one of ``AsyncpgDriver``'s, or a
caller's (``conn=``, see ``adoption``), errors translated (``asyncpg_errors``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import asyncpg

from .._sql import Query
from .asyncpg_errors import DRIVER_ERRORS, translate, translated
from .driver import Row


class AsyncpgExecutor:
    """Statements on one asyncpg connection (a pooled one, or a caller's)."""

    __slots__ = ("_dsn", "_prefix", "broken", "conn")

    def __init__(self, conn: Any, prefix: str, dsn: str | None) -> None:
        self.conn = conn
        self._prefix = prefix
        self._dsn = dsn
        self.broken = False  # stuck mid-protocol: the pool must not get it back

    async def _call(self, method: str, sql: str, args: Sequence[Any]) -> Any:
        try:
            return await getattr(self.conn, method)(sql, *args)
        except DRIVER_ERRORS as exc:
            self.broken = self.broken or isinstance(exc, asyncpg.InternalClientError)
            raise translate(exc, self._prefix, self._dsn) from None

    async def fetch(self, query: Query, args: Sequence[Any]) -> list[Row]:
        rows: list[Row] = await self._call("fetch", query.sql, args)
        return rows

    async def fetchrow(self, query: Query, args: Sequence[Any]) -> Row | None:
        row: Row | None = await self._call("fetchrow", query.sql, args)
        return row

    async def fetchval(self, query: Query, args: Sequence[Any]) -> Any:
        return await self._call("fetchval", query.sql, args)

    async def execute(self, query: Query, args: Sequence[Any]) -> None:
        await self._call("execute", query.sql, args)

    async def script(self, sql: str) -> None:
        await self._call("execute", sql, ())

    async def copy(self, schema: str | None, table: str, columns: Sequence[str],
                   records: Iterable[Sequence[Any]]) -> None:
        with translated(self._prefix, self._dsn):
            await self.conn.copy_records_to_table(table, records=records, columns=columns,
                                                  schema_name=schema)

    @contextlib.asynccontextmanager
    async def atomic(self, savepoint: str) -> AsyncIterator[None]:
        """Our own transaction, or a savepoint inside the caller's however it began
        (asyncpg's ``transaction()`` refuses to nest in one opened with a plain
        ``BEGIN``, and ``conn=`` may be any connection)."""
        c = self.conn
        if not c.is_in_transaction():
            with translated(self._prefix, self._dsn):
                async with c.transaction():
                    yield
            return
        await self._call("execute", f"SAVEPOINT {savepoint}", ())
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                await c.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                await c.execute(f"RELEASE SAVEPOINT {savepoint}")
            raise
        await self._call("execute", f"RELEASE SAVEPOINT {savepoint}", ())
