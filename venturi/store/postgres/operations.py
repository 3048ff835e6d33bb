"""What every group of PostgresStore's operations shares: the driver, the named
statements for this prefix, and binding a statement's parameters.

The groups (``producing``, ``working``, ``inspecting``, ``administering``) are
mixins of PostgresStore, each written against ``driver.Driver`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _sql
from ..base import Clock
from .driver import Driver, Executor, Row


class Operations:
    """The state the operation groups read; PostgresStore sets it up."""

    prefix: str
    clock: Clock
    schema: str | None
    driver: Driver
    _q: dict[str, _sql.Query]

    def _bind(self, name: str, args: Sequence[Any]) -> tuple[_sql.Query, Sequence[Any]]:
        """Statement ``name`` and its parameters; ``$1`` is the clock where it reads one."""
        q = self._q[name]
        if q.uses_now:
            return q, (self.clock.now(), *args)
        return q, args

    def _on(self, conn: Any) -> Executor | None:
        """The executor for a caller's connection (``conn=``), if one was given."""
        return None if conn is None else self.driver.adopt(conn)

    async def _fetch(self, name: str, *args: Any, on: Executor | None = None,
                     keep: bool = False) -> list[Row]:
        q, params = self._bind(name, args)
        return await self.driver.fetch(q, params, on=on, keep=keep)

    async def _row(self, name: str, *args: Any, on: Executor | None = None) -> Row | None:
        q, params = self._bind(name, args)
        return await self.driver.fetchrow(q, params, on=on)

    async def _val(self, name: str, *args: Any, on: Executor | None = None) -> Any:
        q, params = self._bind(name, args)
        return await self.driver.fetchval(q, params, on=on)

    async def _execute(self, name: str, *args: Any, on: Executor | None = None,
                       keep: bool = False) -> None:
        q, params = self._bind(name, args)
        await self.driver.execute(q, params, on=on, keep=keep)
