"""Errors a user meets first: each is a venturi error with one line saying what to do."""

from __future__ import annotations

import pytest

from tests.conftest import new_prefix
from tests.tasks import Embed
from venturi import (
    ConfigError,
    DatabaseError,
    DatabaseUnavailable,
    InvalidJob,
    Queue,
    SchemaMissing,
    VenturiError,
)
from venturi.store.postgres import PostgresStore


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
