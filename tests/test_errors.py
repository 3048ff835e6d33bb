"""Errors a user meets first: each is a venturi error with one line saying what to do."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tests.conftest import new_prefix
from tests.tasks import Embed
from venturi import (
    ConfigError,
    DatabaseConflict,
    DatabaseError,
    DatabaseUnavailable,
    InvalidJob,
    Queue,
    SchemaMissing,
    VenturiError,
)
from venturi.store.postgres import PostgresStore
from venturi.store.postgres.asyncpg_errors import translate


async def test_unreachable_database_is_unavailable_with_the_password_masked() -> None:
    dsn = "postgresql://alice:s3cr3t-pw@127.0.0.1:1/test"
    with pytest.raises(DatabaseUnavailable) as info:
        async with Queue.connect(dsn, prefix="venturi_"):
            pass
    message = str(info.value)
    assert "\n" not in message and message.startswith("database unavailable")
    assert "s3cr3t-pw" not in message and "alice:***@127.0.0.1:1" in message
    assert isinstance(info.value, VenturiError)


async def test_empty_dsn_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="VENTURI_DSN"):
        await PostgresStore.connect("  ")


async def test_missing_schema_says_to_migrate(pg_dsn: str) -> None:
    prefix = new_prefix()  # never migrated
    async with Queue.connect(pg_dsn, prefix=prefix) as queue:
        for attempt in (queue.enqueue(Embed(uri="x")), queue.stats(), queue.count()):
            with pytest.raises(SchemaMissing) as info:
                await attempt
            message = str(info.value)
            assert "\n" not in message and "venturi migrate" in message and prefix in message


async def test_priority_out_of_range_is_invalid_job_in_one_line(queue: Queue) -> None:
    with pytest.raises(InvalidJob) as info:
        await queue.enqueue(Embed(uri="x"), priority=9)
    assert "\n" not in str(info.value) and "0 (high)" in str(info.value)


async def test_a_bad_query_argument_is_not_mistaken_for_an_outage(pg_store: PostgresStore) -> None:
    with pytest.raises(DatabaseError) as info:
        await pg_store.cancel(ids=["not-a-uuid"])  # type: ignore[list-item]
    assert not isinstance(info.value, DatabaseUnavailable)


async def test_a_deadlock_is_a_conflict_worth_running_again(pg_dsn: str) -> None:
    """PostgreSQL breaks a deadlock by rolling one transaction back (40P01): venturi calls
    that a DatabaseConflict, which its settler runs again (tests/worker/test_robustness.py)."""
    table = f"{new_prefix()}locks"
    first, second = await asyncpg.connect(pg_dsn), await asyncpg.connect(pg_dsn)
    try:
        await first.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        await first.execute(f"INSERT INTO {table} VALUES (1), (2)")
        t1, t2 = first.transaction(), second.transaction()
        await t1.start()
        await t2.start()
        await first.execute(f"SELECT 1 FROM {table} WHERE id = 1 FOR UPDATE")
        await second.execute(f"SELECT 1 FROM {table} WHERE id = 2 FOR UPDATE")
        crossed = await asyncio.gather(
            first.execute(f"SELECT 1 FROM {table} WHERE id = 2 FOR UPDATE"),
            second.execute(f"SELECT 1 FROM {table} WHERE id = 1 FOR UPDATE"),
            return_exceptions=True)
        (lost,) = [e for e in crossed if isinstance(e, BaseException)]
        error = translate(lost, "venturi_")
        assert isinstance(error, DatabaseConflict) and isinstance(error, DatabaseError)
        assert str(error).startswith("database conflict 40P01: deadlock detected")
        await t1.rollback()
        await t2.rollback()
    finally:
        await first.execute(f"DROP TABLE IF EXISTS {table}")
        await first.close()
        await second.close()


async def test_a_lock_or_statement_timeout_is_a_conflict_worth_running_again(
        pg_dsn: str) -> None:
    """A lock waited for longer than the session's lock_timeout (55P03) and a statement
    longer than its statement_timeout (57014, also what pg_cancel_backend gives) are
    rolled back for a reason of timing, as a deadlock is: DatabaseConflict, which the
    worker's services send again instead of stopping (docs/concepts/failures.md)."""
    table = f"{new_prefix()}locks"
    holder, waiter = await asyncpg.connect(pg_dsn), await asyncpg.connect(pg_dsn)
    try:
        await holder.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        await holder.execute(f"INSERT INTO {table} VALUES (1)")
        async with holder.transaction():
            await holder.execute(f"SELECT 1 FROM {table} WHERE id = 1 FOR UPDATE")
            await waiter.execute("SET lock_timeout = '50ms'")
            with pytest.raises(asyncpg.PostgresError) as waited:
                await waiter.execute(f"SELECT 1 FROM {table} WHERE id = 1 FOR UPDATE")
        await waiter.execute("SET statement_timeout = '50ms'")
        with pytest.raises(asyncpg.PostgresError) as ran:
            await waiter.execute("SELECT pg_sleep(5)")
        for raised, state in ((waited.value, "55P03"), (ran.value, "57014")):
            error = translate(raised, "venturi_")
            assert isinstance(error, DatabaseConflict), error
            assert str(error).startswith(f"database conflict {state}: "), error
            assert error.sqlstate == state  # what a log may carry instead of the message
    finally:
        await holder.execute(f"DROP TABLE IF EXISTS {table}")
        await holder.close()
        await waiter.close()
