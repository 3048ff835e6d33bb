"""The worker-name lock (rule 9) notices a session that died without telling anyone."""

from __future__ import annotations

from typing import Any

from venturi.store.postgres import PostgresStore


async def test_ping_marks_a_dead_session_lost(pg_store_dbclock: PostgresStore) -> None:
    async with pg_store_dbclock.identity_lock("w-ping") as lock:
        assert await lock.acquire()
        await lock.ping()
        assert not lock.lost.is_set()  # a live session stays held

        real = lock._conn  # type: ignore[attr-defined]

        class Silent:
            """A socket gone silent: the next round trip fails at the transport."""

            async def fetchval(self, *_args: Any, **_kwargs: Any) -> Any:
                raise ConnectionResetError("peer vanished")

            async def close(self) -> None:
                await real.close()

            def terminate(self) -> None:
                real.terminate()

        lock._conn = Silent()  # type: ignore[attr-defined]
        await lock.ping()
        assert lock.lost.is_set()
