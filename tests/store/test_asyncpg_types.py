"""The built-in arrays made known to each new asyncpg connection
(venturi/store/_asyncpg_types.py): the table is PostgreSQL's, the codecs decode as
asyncpg's own introspection would make them, and none of venturi's statements, from a
producer's batch to a worker's boot, claims, settles and maintenance, makes asyncpg
introspect a type any more."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import asyncpg
import asyncpg.connection
import pytest

import venturi
from venturi import Queue, Status
from venturi.store import _connect
from venturi.store._asyncpg_types import BUILTIN_ARRAYS, know_builtin_arrays
from venturi.store.postgres import PostgresStore

pytestmark = pytest.mark.timeout(60)

SAMPLES: dict[str, list[Any]] = {
    "json": ['{"a": 1}', "[1, 2]"],
    "bool": [True, False, None],
    "bytea": [b"\x00\xff", b""],
    "int2": [1, -32768, None],
    "int4": [7, 2_147_483_647],
    "varchar": ["a", "b,c", 'd"e'],
    "int8": [2**40, -1],
    "float4": [1.5, -0.25],
    "float8": [3.25, 1e300],
    "timestamp": [dt.datetime(2026, 12, 7, 3, 0, 0, 123456)],
    "date": [dt.date(2026, 12, 7)],
    "timestamptz": [dt.datetime(2026, 12, 7, 3, 0, tzinfo=dt.UTC)],
    "interval": [dt.timedelta(seconds=30), dt.timedelta(days=2, microseconds=5)],
    "numeric": [decimal.Decimal("1.25"), decimal.Decimal("-3")],
    "regclass": ["pg_class", "pg_type"],
    "uuid": [uuid.UUID(int=1), uuid.uuid4()],
    "jsonb": ['{"a": 1}', "[]"],
}


async def test_the_table_is_postgresqls_own(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch(
            "SELECT t.oid, t.typname, t.typelem, e.typname AS elem, t.typdelim, n.nspname"
            " FROM pg_type AS t JOIN pg_type AS e ON e.oid = t.typelem"
            " JOIN pg_namespace AS n ON n.oid = t.typnamespace WHERE t.oid = ANY($1::oid[])",
            list(BUILTIN_ARRAYS))
    finally:
        await conn.close()
    found = {r["oid"]: (r["typelem"], r["elem"]) for r in rows
             if r["typname"] == "_" + r["elem"] and r["typdelim"] == b","
             and r["nspname"] == "pg_catalog"}
    assert found == BUILTIN_ARRAYS
    assert set(SAMPLES) == {name for _, name in BUILTIN_ARRAYS.values()}


async def test_arrays_read_and_write_as_asyncpgs_own_introspection_makes_them(
        pg_dsn: str) -> None:
    """Each array, sent and read back on a connection that knows them up front and on
    one that introspected them: the same values, and the same text on the server."""
    known = await _connect.connect(pg_dsn)
    plain = await asyncpg.connect(pg_dsn)
    try:
        assert know_builtin_arrays(known)  # this asyncpg takes them: no introspection
        for name, values in SAMPLES.items():
            sql = f"SELECT $1::{name}[] AS a, $1::{name}[]::text AS t"
            a, b = await known.fetchrow(sql, values), await plain.fetchrow(sql, values)
            assert (a["a"], a["t"]) == (b["a"], b["t"]), name
            assert list(a["a"]) == values, name
    finally:
        await known.close()
        await plain.close()


class Quick(venturi.Task, kind="types.quick"):
    n: int

    async def run(self, ctx: venturi.Context) -> None:
        pass


async def test_no_statement_of_a_producer_or_a_worker_makes_asyncpg_introspect(
        pg_store_dbclock: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch enqueue and a worker's whole life on a fresh store: boot (its claim
    session, the kinds' declaration, the name lock), claims, settles, the queue's own
    maintenance, the drain. Each introspection was a ~9 ms catalog query on a new
    connection; the worker's first claim waited for one."""
    seen: list[list[int]] = []
    real = asyncpg.connection.Connection._introspect_types

    async def spy(self: Any, typeoids: Any, timeout: Any) -> Any:
        seen.append(sorted(typeoids))
        return await real(self, typeoids, timeout)

    monkeypatch.setattr(asyncpg.connection.Connection, "_introspect_types", spy)
    queue = Queue(pg_store_dbclock)
    await queue.enqueue_many([Quick(n=n) for n in range(300)])
    await queue.enqueue(Quick(n=300), delay=dt.timedelta(hours=1))
    worker = venturi.Worker(queue, tasks=[Quick], concurrency=20)
    await worker.run(until_empty=True)
    assert await queue.count(kind="types.quick", statuses=[Status.COMPLETED]) == 300
    assert seen == []
