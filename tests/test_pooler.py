"""The Queue behind PgBouncer 1.18 in transaction pool mode.

In transaction mode PgBouncer hands each transaction (each statement outside
one) to whichever server connection is free, and 1.18 does not track
prepared statements: a statement asyncpg prepared and cached on one server
connection is missing on the next. ``pooler=True`` turns asyncpg's statement
cache off (it then uses only unnamed statements, prepared and run in one
round), which is what makes venturi work there; the second test shows the
failure without it.

Session state does not survive the pooler either: migrations take a
transaction-scoped advisory lock, and LISTEN and the worker's identity lock
need a direct connection (``listen_dsn``); a pooler store without one refuses
them with ``ConfigError`` instead of silently losing the lock.

The fixture starts a private pgbouncer (Debian's package; ``.ci/run`` installs
it) on a free port in front of the test database, and the tests skip when
the binary is missing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from tests import pgbouncer
from tests.ci import unavailable
from tests.conftest import drop_prefix, wait_for
from tests.helpers import MIGRATIONS
from tests.sync_waits import Waiting, awaited, until, work
from tests.tasks import Embed, Refresh
from venturi import ConfigError, DatabaseError, Queue, Status, SyncQueue
from venturi.store.base import Action, ClaimRequest, Settlement
from venturi.store.postgres import PostgresStore

LEASE = {"test.embed": dt.timedelta(seconds=10)}


@pytest.fixture(scope="module")
def bouncer_dsn(pg_dsn: str) -> Iterator[str]:
    """A private pgbouncer in transaction mode in front of the test database."""
    if pgbouncer.binary() is None:
        unavailable("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does it)")
    with pgbouncer.bouncer(pg_dsn) as dsn:
        yield dsn


@pytest.fixture
async def bounced(bouncer_dsn: str, pg_dsn: str, prefix: str) -> AsyncIterator[Queue]:
    """A Queue whose every statement goes through the bouncer (migration included)."""
    async with Queue.connect(bouncer_dsn, prefix=prefix, pooler=True, max_size=4) as queue:
        try:
            yield queue
        finally:
            await drop_prefix(pg_dsn, prefix)


async def test_queue_api_through_transaction_pooler(bounced: Queue) -> None:
    assert await bounced.migrate() == MIGRATIONS
    assert await bounced.migrate() == []
    first = await bounced.enqueue(Embed(uri="file:///p/1"))
    ids = await bounced.enqueue_many([Embed(uri="file:///p/2"), Embed(uri="file:///q/3")])
    merged = [await bounced.enqueue(Refresh(uri="file:///r")) for _ in range(3)]
    assert [m.merged for m in merged] == [False, True, True]
    assert len({m.id for m in merged}) == 1
    assert (await bounced.stats()).pending_by_kind == {"test.embed": 3, "test.refresh": 1}
    page = await bounced.history(limit=2)
    assert len(page.jobs) == 2 and page.next_cursor is not None
    assert len((await bounced.history(before=page.next_cursor)).jobs) == 2
    assert await bounced.count(subject="file:///p") == 2
    assert await bounced.cancel(subject="file:///p") == 2
    assert await bounced.cancel(ids=[ids[1]]) == 1

    assert await bounced.count(kind="test.embed") == 0
    assert first.id not in {j.id for j in (await bounced.history()).jobs}
    journal = await bounced.journal(merged[0].id)
    assert [e.outcome.value for e in journal] == ["merged", "merged"]


async def test_dead_job_redriven_and_cleaned_up(bounced: Queue) -> None:
    await bounced.migrate()
    job = await bounced.enqueue(Embed(uri="file:///dead"))
    store = bounced.store
    assert len(await store.claim(ClaimRequest("w/1", LEASE, 1))) == 1
    assert await store.settle("w/1", Settlement(job.id, 1, Action.KILL, note="GiveUp"))
    assert await bounced.retry(ids=[job.id]) == 1
    (claimed,) = await store.claim(ClaimRequest("w/1", LEASE, 1))
    assert await store.settle("w/1", Settlement(job.id, claimed.run_count, Action.COMPLETE))
    row = await bounced.job(job.id)
    assert row is not None and row.status is Status.COMPLETED
    later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    assert await bounced.cleanup(finished_before=later) == 1
    assert await bounced.job(job.id) is None


async def test_statement_cache_breaks_without_pooler_flag(
    bouncer_dsn: str, pg_dsn: str, prefix: str
) -> None:
    """Without ``pooler=True`` a cached prepared statement is run on a server
    connection that never prepared it, and PostgreSQL refuses it."""
    async with Queue.connect(pg_dsn, prefix=prefix) as direct:
        await direct.migrate()
    holder = await asyncpg.connect(bouncer_dsn, statement_cache_size=0)
    try:
        for pooler, expect_failure in ((False, True), (True, False)):
            async with Queue.connect(bouncer_dsn, prefix=prefix, pooler=pooler,
                                     min_size=1, max_size=1) as queue:
                # Prepares (and, without pooler, caches) the insert on server connection A.
                await queue.enqueue(Embed(uri="file:///cached"))
                # Keep A busy: PgBouncer reuses the most recently freed server connection.
                async with holder.transaction():
                    await holder.fetchval("SELECT 1")
                    if expect_failure:
                        with pytest.raises(DatabaseError, match="prepared statement"):
                            await queue.enqueue(Embed(uri="file:///cached"))
                    else:
                        await queue.enqueue(Embed(uri="file:///cached"))
        async with Queue.connect(pg_dsn, prefix=prefix) as direct:
            assert await direct.count(kind="test.embed") == 3  # nothing half-written
    finally:
        await holder.close()
        await drop_prefix(pg_dsn, prefix)


async def test_synchronous_queue_prepares_nothing_with_pooler_flag(
    bouncer_dsn: str, pg_dsn: str, prefix: str
) -> None:
    """SyncQueue's pool keeps its single-row insert prepared; behind PgBouncer that
    statement is then missing on the next server connection, unless ``pooler=True``
    (nothing prepared, as with the asyncpg pool)."""
    with SyncQueue.connect(pg_dsn, prefix=prefix) as direct:
        direct.migrate()
    holder = await asyncpg.connect(bouncer_dsn, statement_cache_size=0)
    try:
        for pooler, expect_failure in ((False, True), (True, False)):
            with SyncQueue.connect(bouncer_dsn, prefix=prefix, pooler=pooler,
                                   min_size=1, max_size=1) as queue:
                # Prepares the insert on server connection A (without pooler).
                queue.enqueue(Embed(uri="file:///cached"))
                async with holder.transaction():  # keeps A busy
                    await holder.fetchval("SELECT 1")
                    if expect_failure:
                        with pytest.raises(DatabaseError, match="prepared statement"):
                            queue.enqueue(Embed(uri="file:///cached"))
                    else:
                        for _ in range(8):
                            queue.enqueue(Embed(uri="file:///cached"))
                        queue.enqueue_many([Embed(uri="file:///many")] * 3)
                        assert queue.count(kind="test.embed") == 13
        with SyncQueue.connect(pg_dsn, prefix=prefix) as direct:
            assert direct.count(kind="test.embed") == 13  # nothing half-written
    finally:
        await holder.close()
        await drop_prefix(pg_dsn, prefix)


async def test_session_state_needs_a_direct_connection(
    bouncer_dsn: str, pg_dsn: str, prefix: str
) -> None:
    store = await PostgresStore.connect(bouncer_dsn, prefix=prefix, pooler=True)
    try:
        with pytest.raises(ConfigError, match="listen_dsn"):
            store.listen()
        with pytest.raises(ConfigError, match="listen_dsn"):
            store.identity_lock("w")
    finally:
        await store.close()
    store = await PostgresStore.connect(bouncer_dsn, prefix=prefix, pooler=True,
                                        listen_dsn=pg_dsn)
    try:
        async with store.identity_lock("w") as lock, store.identity_lock("w") as other:
            assert await lock.acquire()
            assert not await other.acquire()  # held by the first lock's direct session
    finally:
        await store.close()


async def test_concurrent_migrations_through_pooler(bouncer_dsn: str, pg_dsn: str,
                                                    prefix: str) -> None:
    """The migration lock is transaction-scoped: taken and released on one server
    connection, so concurrent migrators behind the pooler neither race nor hang."""
    import asyncio

    from venturi.store._sql import migrations

    queues = []
    try:
        for _ in range(3):
            store = await PostgresStore.connect(bouncer_dsn, prefix=prefix, pooler=True,
                                                max_size=1)
            queues.append(Queue(store))
        results = await asyncio.wait_for(
            asyncio.gather(*(q.migrate() for q in queues)), timeout=30)
        assert sorted(len(r) for r in results) == [0, 0, len(migrations())]
        # The lock is free again on every server connection.
        results = await asyncio.wait_for(
            asyncio.gather(*(q.migrate() for q in queues)), timeout=30)
        assert results == [[], [], []]
    finally:
        for q in queues:
            await q.close()
        await drop_prefix(pg_dsn, prefix)


async def test_worker_process_behind_transaction_pooler(
    bouncer_dsn: str, pg_dsn: str, prefix: str, tmp_path: Path
) -> None:
    """``venturi --pooler worker --dsn <bouncer> --listen-dsn <direct>`` drains a queue:
    every statement through the pooler without prepared statements, LISTEN and the
    name's lock on the direct connection (a cancel reaching a running job proves the
    LISTEN: renewal, the only other way, is 20 s away and would log ``lease_lost``)."""
    from benchmarks.workers import WorkerProc
    from tests.chaos.tasks import Noop, Parked

    marks = tmp_path / "marks"
    marks.mkdir()
    async with Queue.connect(bouncer_dsn, prefix=prefix, pooler=True, max_size=4) as queue:
        await queue.migrate()
        backlog = await queue.enqueue_many([Noop(n=i) for i in range(300)])
        w = WorkerProc(bouncer_dsn, prefix, tmp_path, name="bounced", concurrency=10,
                       global_options=["--pooler"], extra=["--listen-dsn", pg_dsn])
        try:
            async def drained() -> bool:
                assert w.alive(), w.errors()
                return await queue.count(statuses=[Status.COMPLETED]) == len(backlog)
            await wait_for(drained, timeout=60, what="the backlog to drain")
            parked = (await queue.enqueue(Parked(marks=str(marks)))).id
            await wait_for(lambda: (marks / f"{parked}.start").exists(), timeout=20,
                           what="the parked job to start")
            assert await queue.cancel(ids=[parked]) == 1
            await wait_for(lambda: w.logged("job_cancelled"), what="the cancel to reach it")
            w.terminate()
            assert await asyncio.to_thread(w.wait, 30) == 0, w.errors()
        finally:
            if w.alive():
                w.kill9()
        for id in backlog:
            assert [e.outcome.value for e in await queue.journal(id)] == ["completed"]
        assert await queue.job(parked) is None
    assert not w.logged("db_unavailable") and "prepared statement" not in w.output()
    assert not w.logged("lease_lost")
    await drop_prefix(pg_dsn, prefix)


def test_sync_result_listens_on_a_direct_connection(bouncer_dsn: str, pg_dsn: str,
                                                    prefix: str) -> None:
    """SyncQueue.result's LISTEN cannot go through the pooler (the notifications would
    reach whichever client runs the next transaction on that server connection): without
    listen_dsn the call is refused at once, with it the call is answered."""
    with SyncQueue.connect(pg_dsn, prefix=prefix) as direct:
        direct.migrate()
    try:
        with SyncQueue.connect(bouncer_dsn, prefix=prefix, pooler=True) as bounced:
            pending = bounced.enqueue(Embed(uri="file:///sync/1"))
            began = time.monotonic()
            with pytest.raises(ConfigError, match="listen_dsn"):
                bounced.result(pending.id, timeout=30)
            assert time.monotonic() - began < 10  # refused, not waited out
        with SyncQueue.connect(bouncer_dsn, prefix=prefix, pooler=True,
                               listen_dsn=pg_dsn) as bounced:
            job = bounced.enqueue(Embed(uri="file:///sync/2"))
            call = Waiting(bounced, job.id)
            until(lambda: awaited(pg_dsn, prefix, [job.id]), "the call to read its job")
            work(pg_dsn, prefix, Embed)
            assert call.outcome() is None  # Embed sets no result
    finally:
        asyncio.run(drop_prefix(pg_dsn, prefix))

