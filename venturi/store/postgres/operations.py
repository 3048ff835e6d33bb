"""What every group of PostgresStore's operations shares: the driver, the named
statements for this prefix, and binding a statement's parameters.

The groups (``producing``, ``working``, ``inspecting``, ``administering``) are
mixins of PostgresStore, each written against ``driver.Driver`` only.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import anyio

from ...errors import CONFLICT_ATTEMPTS, CONFLICT_PAUSE, DatabaseConflict, classify
from ...logs import get_logger
from .. import _sql
from ..base import Clock
from .driver import Driver, Executor, Row

log = get_logger("venturi.store")


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

    async def _val_again(self, name: str, *args: Any, on: Executor | None = None) -> Any:
        """``_val`` for an operator's statement whose effect does not depend on how often
        it runs (cancel, redrive, cleanup). In a transaction of the store's own it is sent
        again, up to ``CONFLICT_ATTEMPTS`` times in all, when PostgreSQL rolled it back for
        a reason of timing (``DatabaseConflict``: a deadlock with a worker's settle, say);
        the pause before each new try is drawn between one and two ``CONFLICT_PAUSE`` so
        that two losers do not meet again in step. In a caller's transaction (``on``) it is
        not: that transaction is rolled back whole, and only the caller can run it again."""
        for attempt in range(1, 1 if on is not None else CONFLICT_ATTEMPTS):
            try:
                return await self._val(name, *args, on=on)
            except DatabaseConflict as exc:
                log.info("admin_conflict_retried", statement=name, attempt=attempt,
                         error=classify(exc))
                await anyio.sleep(CONFLICT_PAUSE * (1 + random.random()))
        return await self._val(name, *args, on=on)
