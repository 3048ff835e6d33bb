"""Small builders shared by the store-level tests: those the shipped conformance
suite uses (``venturi.testing.builders``), re-exported for the tests kept here."""

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from venturi.store.postgres import PostgresStore
from venturi.testing.builders import LEASE, add, claim_one, job, new_job, request, settlement

from .conftest import drop_prefix, new_prefix

__all__ = ["LEASE", "MIGRATIONS", "add", "claim_one", "job", "migrated_prefix", "new_job",
           "request", "settlement"]

# Every migration in sql/, in order: what a fresh prefix's `venturi migrate` applies.
# tests/test_migrations.py checks that this is what the package ships.
MIGRATIONS = ["0001_init.sql", "0002_storage.sql", "0003_kinds.sql", "0004_results.sql",
              "0005_trace.sql", "0006_tallies.sql", "0007_claimed_kinds.sql",
              "0008_workflows_fanin.sql", "0009_awaited.sql",
              "0010_storage_dependencies.sql"]


@contextmanager
def migrated_prefix(dsn: str) -> Iterator[str]:
    """A fresh, migrated prefix for a synchronous test (the model tests drive their own
    event loops), its tables dropped after."""
    prefix = new_prefix()

    async def migrate() -> None:
        store = await PostgresStore.connect(dsn, prefix=prefix, max_size=1)
        try:
            await store.migrate()
        finally:
            await store.close()

    asyncio.run(migrate())
    try:
        yield prefix
    finally:
        asyncio.run(drop_prefix(dsn, prefix))
