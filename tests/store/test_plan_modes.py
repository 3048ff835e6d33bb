"""A run of single-row inserts plans with a generic plan; nothing else ever does
(venturi/store/postgres/asyncpg_plans.py).

The asyncpg pool's sessions plan every statement with its parameters, so that a
statement reading a table never keeps a plan made when the table was small
(tests/store/test_plan_cache.py). The statements marked ``-- prepared:`` read no table:
the driver switches a kept connection to generic plans for a run of them and must switch
it back before it serves anything else, however it leaves the run. Each test reads the
plans PostgreSQL itself counted for the session (``pg_prepared_statements``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.conftest import drop_prefix, wait_for
from tests.tasks import Embed, Refresh, Urgent
from venturi import DatabaseError, Queue
from venturi.store._sql import Query
from venturi.store.postgres import PostgresStore, asyncpg_driver
from venturi.store.postgres.asyncpg_plans import GENERIC_AFTER, TO_GENERIC

RUN = GENERIC_AFTER + 5  # inserts in a row: the last five on a generic plan


@pytest.fixture
async def small(pg_dsn: str, prefix: str,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[PostgresStore]:
    """One connection, kept until the test lets it go: every statement runs on the
    session whose plans the test reads."""
    monkeypatch.setattr(asyncpg_driver, "LINGER", 3600)
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, min_size=1, max_size=1)
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)


async def plans(conn: Any, store: PostgresStore) -> dict[str, tuple[int, int]]:
    """(generic, custom) plans so far of each of the store's statements on ``conn``."""
    names = {q.sql: name for name, q in store._q.items()}
    rows = await conn.fetch(
        "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
    return {names[r[0]]: (r[1], r[2]) for r in rows if r[0] in names}


async def mode(conn: Any) -> str:
    return str(await conn.fetchval("SHOW plan_cache_mode"))


async def inserts(queue: Queue, n: int = RUN) -> None:
    for i in range(n):
        await queue.enqueue(Embed(uri=f"file:///{i}"))  # insert_one: it has a subject


def prepared(store: PostgresStore) -> set[str]:
    return {name for name, q in store._q.items() if q.prepared}


async def test_a_run_of_inserts_goes_generic_and_every_other_statement_plans_per_call(
        small: PostgresStore) -> None:
    queue = Queue(small)
    await inserts(queue)
    (kept,) = small.driver._idle  # type: ignore[attr-defined]
    assert await mode(kept) == "force_generic_plan"
    assert (await plans(kept, small))["insert_one"] == (RUN - GENERIC_AFTER, GENERIC_AFTER)
    # Statements that read the table, on that same session, right after the run.
    job = await queue.enqueue(Embed(uri="file:///x"))
    for _ in range(8):  # past the fifth execution, where "auto" may go generic
        assert await queue.job(job.id) is not None
        assert await queue.count(kind="test.embed") > RUN
        await inserts(queue, GENERIC_AFTER + 1)
        for n in range(GENERIC_AFTER + 1):
            await queue.enqueue(Urgent(n=n))  # no subject: nothing but the task's columns
        await queue.enqueue(Refresh(uri="file:///r"))  # dedup: a session of statements
    # The pool's only connection, kept again by the dedup session (a statement that does
    # not keep hands its connection back to the pool, and the pool lends a new proxy).
    (kept,) = small.driver._idle  # type: ignore[attr-defined]
    assert await mode(kept) == "force_custom_plan"
    seen = await plans(kept, small)
    assert {"job", "count_status", "dedup_candidate", "dedup_lock"} <= set(seen), sorted(seen)
    # A statement without parameters has only the one plan, generic whatever the
    # setting (the migrations' bookkeeping, run on this session by migrate()).
    generic = {name for name, (g, _) in seen.items() if g and "$1" in small._q[name].sql}
    assert "insert_one" in generic and generic == prepared(small) & seen.keys(), seen


async def test_a_switched_connection_goes_back_to_the_pool_planning_per_call(
        small: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncpg_driver, "LINGER", 0.02)
    await inserts(Queue(small))
    await wait_for(lambda: not small.driver._idle  # type: ignore[attr-defined]
                   and not small.driver._releasing, what="the kept connection released")
    async with small.pool.acquire(timeout=5) as c:
        assert await mode(c) == "force_custom_plan"
    assert small.driver._plans.generic == set()  # type: ignore[attr-defined]


async def test_a_failed_statement_on_a_switched_connection_does_not_leave_it_generic(
        small: PostgresStore) -> None:
    await inserts(Queue(small))
    fails = Query("fails", "SELECT 1/0", False, prepared=True)
    with pytest.raises(DatabaseError):
        await small.driver.execute(fails, (), keep=True)
    assert small.driver._idle == []  # type: ignore[attr-defined]
    async with small.pool.acquire(timeout=5) as c:  # back through the pool's reset
        assert await mode(c) == "force_custom_plan"


async def test_cancelled_on_a_switched_connection_it_goes_back_planning_per_call(
        small: PostgresStore, pg_dsn: str, prefix: str) -> None:
    queue = Queue(small)
    await inserts(queue)
    blocker = await asyncpg.connect(pg_dsn)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(f"LOCK TABLE {prefix}jobs IN ACCESS EXCLUSIVE MODE")
        task = asyncio.create_task(queue.enqueue(Embed(uri="file:///cancelled")))

        async def waiting_on_lock() -> bool:
            return bool(await blocker.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE $1", f"%{prefix}jobs%"))

        await wait_for(waiting_on_lock, what="insert blocked on the lock")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await tx.rollback()
    finally:
        await blocker.close()
    assert small.driver._idle == []  # type: ignore[attr-defined]
    async with small.pool.acquire(timeout=5) as c:
        assert await mode(c) == "force_custom_plan"


async def test_interrupted_right_after_the_switch_the_session_still_goes_back(
        small: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancellation that lands once the server has applied the SET, before the
    driver hears back: the session was recorded as switched before the SET was sent."""
    original = asyncpg.connection.Connection.execute

    async def interrupted(self: Any, query: str, *args: Any, **kw: Any) -> Any:
        result = await original(self, query, *args, **kw)
        if query == TO_GENERIC:
            raise asyncio.CancelledError
        return result

    monkeypatch.setattr(asyncpg.connection.Connection, "execute", interrupted)
    with pytest.raises(asyncio.CancelledError):
        await inserts(Queue(small))
    monkeypatch.undo()
    async with small.pool.acquire(timeout=5) as c:
        assert await mode(c) == "force_custom_plan"


async def test_close_puts_a_switched_session_back(pg_dsn: str, prefix: str) -> None:
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, min_size=1, max_size=1)
    try:
        await store.migrate()
        await inserts(Queue(store))
        switched = set(store.driver._plans.generic)  # type: ignore[attr-defined]
        assert len(switched) == 1
        await asyncio.wait_for(store.close(), timeout=3)
        assert store.driver._plans.generic == set()  # type: ignore[attr-defined]
    finally:
        await store.close()
        await drop_prefix(pg_dsn, prefix)


async def test_nothing_is_switched_where_the_session_is_not_ours_to_set(
        pg_dsn: str, prefix: str) -> None:
    """A DSN that chooses its own plan_cache_mode, and a pool the caller passed in, are
    left as they are: no SET is ever sent on them."""
    store = await PostgresStore.connect(f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}"
                                        "plan_cache_mode=force_custom_plan",
                                        prefix=prefix, min_size=1, max_size=1)
    try:
        await store.migrate()
        await inserts(Queue(store))
        assert store.driver._plans is None  # type: ignore[attr-defined]
        (kept,) = store.driver._idle  # type: ignore[attr-defined]
        assert await mode(kept) == "force_custom_plan"
    finally:
        await store.close()
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    try:
        theirs = PostgresStore.from_pool(pool, prefix=prefix)
        await inserts(Queue(theirs))
        assert theirs.driver._plans is None  # type: ignore[attr-defined]
        async with pool.acquire() as c:
            assert await mode(c) == "auto"
    finally:
        await pool.close()
        await drop_prefix(pg_dsn, prefix)


async def test_a_run_ends_when_its_kept_connection_goes_back_to_the_pool(
        small: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone insert after the kept connection went back to the pool plans per call: it
    is not the next of the earlier run (which would switch the connection the pool
    lends to generic plans and back, two round trips for one insert)."""
    monkeypatch.setattr(asyncpg_driver, "LINGER", 0.02)
    queue = Queue(small)
    await inserts(queue)
    await wait_for(lambda: not small.driver._idle  # type: ignore[attr-defined]
                   and not small.driver._releasing, what="the kept connection released")
    monkeypatch.setattr(asyncpg_driver, "LINGER", 3600)
    for _ in range(2):  # the pool's next lending, then the same one kept
        await queue.enqueue(Urgent(n=1))
        (kept,) = small.driver._idle  # type: ignore[attr-defined]
        assert await mode(kept) == "force_custom_plan"
    assert small.driver._plans.generic == set()  # type: ignore[attr-defined]
    await inserts(queue, GENERIC_AFTER + 1)  # a new run still goes generic
    (kept,) = small.driver._idle  # type: ignore[attr-defined]
    assert await mode(kept) == "force_generic_plan"


async def test_a_run_of_plain_enqueues_goes_generic_once(small: PostgresStore) -> None:
    """Queue.enqueue's plain path (insert_now) is such a run too, and the switched
    connection is switched once, however long the run."""
    queue = Queue(small)
    sets: list[str] = []
    original = asyncpg.connection.Connection.execute

    async def counted(self: Any, query: str, *args: Any, **kw: Any) -> Any:
        if query.startswith("SET plan_cache_mode"):
            sets.append(query)
        return await original(self, query, *args, **kw)

    asyncpg.connection.Connection.execute = counted  # type: ignore[method-assign]
    try:
        for n in range(RUN * 3):
            await queue.enqueue(Urgent(n=n))
    finally:
        asyncpg.connection.Connection.execute = original  # type: ignore[method-assign]
    assert sets == [TO_GENERIC]
    (kept,) = small.driver._idle  # type: ignore[attr-defined]
    assert (await plans(kept, small))["insert_now"] == (RUN * 3 - GENERIC_AFTER, GENERIC_AFTER)
