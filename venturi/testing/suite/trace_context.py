"""The trace context a job was enqueued under (docs/operations/tracing.md): every way a
job is inserted stores it, every read of a job returns it. At this level it is opaque
JSON text; venturi.tracing writes and reads it."""

from __future__ import annotations

import datetime as dt

import orjson

from venturi import ManualClock
from venturi._ids import uuid7
from venturi.store.base import Action, HistoryFilter, NewJobBatch, Store
from venturi.testing.builders import add, claim_one, job, new_job, request, settlement

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
CONTEXT = {"traceparent": PARENT, "tracestate": "venturi=1"}
TEXT = orjson.dumps(CONTEXT).decode()


async def test_enqueue_stores_the_trace_context(store: Store) -> None:
    traced, plain = await add(store, new_job(trace_context=TEXT), new_job())
    (alone,) = await add(store, new_job(trace_context=TEXT))
    rows = [await job(store, j.id) for j in (traced, plain, alone)]
    assert [r.trace_context for r in rows] == [CONTEXT, None, CONTEXT]
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    assert [r.trace_id for r in rows] == [trace_id, None, trace_id]


async def test_a_batch_stores_one_trace_context_on_every_row(store: Store) -> None:
    n = 3
    batch = NewJobBatch(ids=[uuid7() for _ in range(n)], kinds=["k"] * n,
                        payloads=["{}"] * n, priorities=[1] * n, max_failures=[25] * n,
                        trace_context=TEXT)
    await store.enqueue_batch(batch)
    plain = NewJobBatch(ids=[uuid7()], kinds=["k"], payloads=["{}"], priorities=[1],
                        max_failures=[25])
    await store.enqueue_batch(plain)
    assert [(await job(store, i)).trace_context for i in batch.ids + plain.ids] == [
        CONTEXT] * n + [None]


async def test_claims_and_listings_return_the_trace_context(store: Store) -> None:
    (first,) = await add(store, new_job(trace_context=TEXT))
    claimed = await claim_one(store, "k")
    assert (claimed.id, claimed.trace_context) == (first.id, CONTEXT)
    assert [r.trace_context for r in await store.query_jobs(HistoryFilter())] == [CONTEXT]


async def test_seeds_and_successors_carry_their_own_trace_context(
    store: Store, clock: ManualClock
) -> None:
    seed = new_job("tick", periodic=True, trace_context=TEXT)
    assert await store.seed_periodic([seed]) == 1
    claimed = await claim_one(store, "tick")
    assert claimed.trace_context == CONTEXT
    nxt = uuid7()
    context = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    await store.settle_many("w/1", [settlement(
        claimed, Action.COMPLETE, successor=(nxt, clock.now() + dt.timedelta(seconds=5)),
        successor_trace=orjson.dumps(context).decode())])
    assert (await job(store, nxt)).trace_context == context
    # A settle without one inserts a successor without one.
    clock.advance(dt.timedelta(seconds=10))
    (again,) = await store.claim(request("tick", limit=1))
    last = uuid7()
    await store.settle_many("w/1", [settlement(again, Action.KILL, successor=(last, clock.now()))])
    assert (await job(store, again.id)).trace_context == context
    assert (await job(store, last)).trace_context is None
