"""The worker-name lock (rule 9) notices a session that died without telling anyone."""

from __future__ import annotations

from typing import Any

from venturi.store.postgres import PostgresStore

from ..conftest import wait_for


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


class _Gone:
    """What is left of a session whose client end died in a partition: nothing to close
    here, while the server keeps the session (and its lock) open."""

    async def close(self) -> None:
        return None

    def terminate(self) -> None:
        return None


async def _backend_alive(store: PostgresStore, pid: int) -> bool:
    return bool(await store.pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid))


async def test_the_lock_is_taken_back_from_our_own_lost_session(
        pg_store_dbclock: PostgresStore) -> None:
    """After a partition the server may still hold the name for the session whose client
    end is gone: re-acquiring ends that session (ours, holding this lock), not the worker."""
    store = pg_store_dbclock
    async with store.identity_lock("w-zombie") as lock:
        assert await lock.acquire()
        zombie = lock._conn  # type: ignore[attr-defined]
        zombie_pid = zombie.get_server_pid()
        lock._conn = _Gone()  # type: ignore[attr-defined]
        try:
            assert await lock.acquire()
            assert not await _backend_alive(store, zombie_pid)
            async with store.identity_lock("w-zombie") as rival:
                assert not await rival.acquire()  # still one holder
        finally:
            zombie.terminate()


async def test_a_name_another_worker_took_is_not_taken_back(
        pg_store_dbclock: PostgresStore) -> None:
    store = pg_store_dbclock
    async with store.identity_lock("w-taken") as first, \
            store.identity_lock("w-taken") as second:
        assert await first.acquire()
        first._conn.terminate()  # type: ignore[attr-defined]  # its session really ends
        await wait_for(second.acquire, timeout=10, interval=0.05,
                       what="the name to be free (the first session to end)")
        holder = second._conn.get_server_pid()  # type: ignore[attr-defined]
        assert not await first.acquire()  # identity_taken: the worker would drain
        assert await _backend_alive(store, holder)
