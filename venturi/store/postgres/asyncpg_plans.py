"""Generic plans for the statements that read no table, on the asyncpg pool's connections.

The pool's sessions plan every execution with its parameters (``driver.SESSION_SETTINGS``:
a generic plan of a statement that reads a table can go stale as the table grows). A
statement marked ``-- prepared:`` reads no table (the single-row insert), so its generic
plan has nothing to go stale, and planning it again on every call cost an enqueue about a
tenth of its time (benchmarks/results-enqueue.md). ``plan_cache_mode`` is a session
setting, so the driver switches a connection's session to generic plans while it serves a
run of such statements, and back before it serves anything else:

- only a connection the driver keeps between statements (``AsyncpgDriver._keep``) is
  switched, and only after ``GENERIC_AFTER`` such statements in a row were served by kept
  connections: the switch costs a round trip, which a lone insert would not earn back;
- a switched connection is recorded (by its server pid) *before* the ``SET`` is sent, and
  forgotten only after the ``SET`` back succeeded, so whatever interrupts either (an
  error, a cancellation, a lost session) it is never taken for one that plans per call;
- every other statement that takes a kept connection switches it back first, and the
  pool's reset hook does when the connection goes back to the pool, however it goes (the
  linger timer, an error, ``close()``); a reset that fails makes asyncpg terminate the
  connection instead of pooling it.

A recorded pid whose session died while switched stays recorded: a later session given the
same pid is then switched back once needlessly, never the other way round.
"""

from __future__ import annotations

from typing import Any

# How many ``-- prepared:`` statements in a row, each on a kept connection, before the
# connection is switched: a SET round trip costs about what two inserts save.
GENERIC_AFTER = 3
TO_GENERIC = "SET plan_cache_mode = force_generic_plan"


class PlanModes:
    """Which of one pool's connections are switched to generic plans, and the switches.
    ``restore`` is the ``SET`` that puts a session back to the pool's own setting."""

    __slots__ = ("generic", "known", "restore", "streak")

    def __init__(self, mode: str) -> None:
        self.restore = f"SET plan_cache_mode = {mode}"
        self.generic: set[int] = set()  # server pids of the switched sessions
        # ``-- prepared:`` statements run in a row on kept connections (AsyncpgDriver._run);
        # back to 0 when the kept connections go back to the pool.
        self.streak = 0
        # The pool's proxy of the connection last found switched, for as long as it is
        # lent out (a new lending is a new proxy): a run of inserts on it asks for its
        # pid once, not on every insert.
        self.known: Any = None

    async def to_generic(self, conn: Any) -> None:
        self.generic.add(conn.get_server_pid())
        await conn.execute(TO_GENERIC)

    async def to_own(self, conn: Any) -> None:
        """Back to the pool's setting, if ``conn`` was switched."""
        if conn is self.known:
            self.known = None
        pid = conn.get_server_pid()
        if pid in self.generic:
            await conn.execute(self.restore)
            self.generic.discard(pid)

    async def reset(self, conn: Any) -> None:
        """The pool's reset hook: no round trip for a session that was not switched
        (asyncpg's own reset query is skipped, see asyncpg_setup.keep_session)."""
        if self.generic:
            await self.to_own(conn)
