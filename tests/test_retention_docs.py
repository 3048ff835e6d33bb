"""The autovacuum settings that docs/operations/retention.md recommends (and the soak
measured, benchmarks/results-soak.md) are valid storage parameters on venturi's tables."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg

from venturi.store.postgres import PostgresStore

PAGE = Path(__file__).resolve().parent.parent / "docs" / "operations" / "retention.md"


def sql_blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", PAGE.read_text(), re.DOTALL)


async def test_recommended_table_settings_apply(pg_store: PostgresStore, pg_dsn: str) -> None:
    (settings,) = [b for b in sql_blocks() if "ALTER TABLE venturi_jobs SET" in b]
    prefix = pg_store.prefix
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(settings.replace("venturi_", prefix))
        options = dict(await conn.fetch(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY($1::text[])",
            [f"{prefix}jobs", f"{prefix}journal"]))
        await conn.execute(f"VACUUM {prefix}jobs, {prefix}journal")  # the fallback cadence
    finally:
        await conn.close()
    assert "autovacuum_vacuum_threshold=5000" in options[f"{prefix}jobs"]
    assert "fillfactor=80" in options[f"{prefix}jobs"]  # the schema's own setting is kept
    assert "autovacuum_vacuum_insert_threshold=50000" in options[f"{prefix}journal"]
