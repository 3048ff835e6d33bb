"""A large fan-in counted through shards (sql/0008_workflows_fanin.sql), under
concurrency: the settles of a join's last dependencies, each its own transaction on
its own connection, committing at once; exactly when the last has committed, the join
is visible, and ``waiting`` reports the true number left on the way
(docs/concepts/workflows.md). tests/test_model_dependencies.py runs the shards
against the in-memory store on random graphs."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import venturi
from venturi import Queue, Status, Workflow
from venturi.store.base import Action, ClaimRequest, Settlement
from venturi.store.postgres import PostgresStore

pytestmark = pytest.mark.timeout(120)

KIND = "test.fanin.step"
LEASE = {KIND: dt.timedelta(seconds=60)}
WIDTH = 130  # above fanin_shard_at (64): 12 shards of 10 or 11
LAST = 12  # settled at once, on as many connections
ROUNDS = 8


class FanStep(venturi.Task, kind=KIND):
    n: int

    async def run(self, ctx: venturi.Context) -> None:
        return None


async def _settle_one(store: PostgresStore, job: venturi.JobRecord, go: asyncio.Event) -> None:
    await go.wait()
    await store.settle_many("w/fan", [Settlement(job.id, job.run_count, Action.COMPLETE)])


async def test_the_last_dependencies_settled_at_once_release_the_join_once(
        pg_dsn: str, prefix: str) -> None:
    store = await PostgresStore.connect(pg_dsn, prefix=prefix, min_size=LAST + 1,
                                        max_size=LAST + 2)
    try:
        await store.migrate()
        queue = Queue(store)
        assert store.fanin_shard_at <= WIDTH
        for round in range(ROUNDS):
            wf = Workflow(f"fan-{round}")
            split = wf.add(FanStep(n=0), name="split")
            middle = [wf.add(FanStep(n=i), after=[split]) for i in range(1, WIDTH + 1)]
            join = wf.add(FanStep(n=-1), after=middle, name="join")
            await queue.enqueue_workflow(wf)
            async with store.pool.acquire() as conn:
                shards = await conn.fetchval(
                    f"SELECT count(*) FROM {prefix}dependency_shards WHERE job_id = $1",
                    join.id)
            assert shards == 12  # ceil(sqrt(130))

            (root,) = await store.claim(ClaimRequest("w/fan", LEASE, 10))
            await store.settle_many("w/fan", [Settlement(root.id, 1, Action.COMPLETE)])
            claimed = await store.claim(ClaimRequest("w/fan", LEASE, WIDTH + 10))
            assert {j.id for j in claimed} == {s.id for s in middle}
            # Shards are dealt round-robin in id order: the last twelve ids close the
            # twelve shards at once (a race on the join's row); every twelfth id fills
            # one shard (a race on that shard's row, then on the join's).
            claimed.sort(key=lambda j: j.id)
            last = claimed[-LAST:] if round % 2 == 0 else claimed[::shards]
            first = [j for j in claimed if j not in last]
            now = asyncio.Event()
            now.set()
            await asyncio.gather(*(_settle_one(store, j, now) for j in first))
            record = await queue.job(join.id)
            assert record is not None and record.status is Status.PENDING
            assert record.waiting == len(last)  # the true count, not the open shards
            assert await store.claim(ClaimRequest("w/fan", LEASE, 10)) == []

            go = asyncio.Event()
            settles = [asyncio.create_task(_settle_one(store, j, go)) for j in last]
            await asyncio.sleep(0)  # every settle waits on the event, then all start
            go.set()
            await asyncio.gather(*settles)
            record = await queue.job(join.id)
            assert record is not None and record.waiting == 0, round
            released = await store.claim(ClaimRequest("w/fan", LEASE, 10))
            assert [j.id for j in released] == [join.id], round
            await store.settle_many("w/fan", [Settlement(join.id, 1, Action.COMPLETE)])
            async with store.pool.acquire() as conn:
                left = await conn.fetchval(
                    f"SELECT coalesce(sum(waiting), 0) FROM {prefix}dependency_shards"
                    " WHERE job_id = $1", join.id)
            assert left == 0
    finally:
        await store.close()


async def test_a_redriven_dependency_of_a_sharded_join_fails_and_brings_it_back(
        pg_dsn: str, prefix: str) -> None:
    """A dead dependency fails the join (dependency-failed); its redrive brings the join
    back, counting on its own row the dependencies still unfinished."""
    store = await PostgresStore.connect(pg_dsn, prefix=prefix)
    try:
        await store.migrate()
        queue = Queue(store)
        wf = Workflow("fan-fail")
        middle = [wf.add(FanStep(n=i)) for i in range(WIDTH)]
        join = wf.add(FanStep(n=-1), after=middle, name="join")
        await queue.enqueue_workflow(wf)
        claimed = await store.claim(ClaimRequest("w/fan", LEASE, WIDTH))
        doomed, rest = claimed[0], claimed[1:]
        await store.settle_many("w/fan", [Settlement(doomed.id, 1, Action.KILL)])
        record = await queue.job(join.id)
        assert record is not None and record.status is Status.DEAD
        assert await queue.retry(ids=[doomed.id]) == 1
        record = await queue.job(join.id)
        assert record is not None and record.status is Status.PENDING
        assert record.waiting == WIDTH  # the redriven one and every one still claimed
        await store.settle_many("w/fan", [Settlement(j.id, 1, Action.COMPLETE) for j in rest])
        assert (await queue.job(join.id)).waiting == 1  # type: ignore[union-attr]
        (again,) = await store.claim(ClaimRequest("w/fan", LEASE, 10))
        assert again.id == doomed.id
        await store.settle_many("w/fan", [Settlement(again.id, again.run_count,
                                                     Action.COMPLETE)])
        released = await store.claim(ClaimRequest("w/fan", LEASE, 10))
        assert [j.id for j in released] == [join.id]
    finally:
        await store.close()
