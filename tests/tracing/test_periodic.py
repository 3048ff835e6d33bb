"""A periodic job's occurrences (docs/concepts/periodic.md) are sent too: the seed a
worker inserts is a ``send`` span of its own, and each occurrence's successor is sent
from its run, a ``send`` child of the ``process`` span, linked by the next run."""

from __future__ import annotations

import asyncio

import pytest

import venturi
from venturi import Queue
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .recording import Recorded
from .spans import traceparent
from .tasks import Tick

pytestmark = pytest.mark.timeout(60)


async def test_seed_and_successors_are_sent_and_linked(
        pg_store_dbclock: PostgresStore, spans: Recorded) -> None:
    queue = Queue(pg_store_dbclock)
    worker = venturi.Worker(queue, tasks=[Tick], concurrency=1)
    running = asyncio.create_task(worker.run())

    async def two_ran() -> bool:
        return await queue.count(kind="trace.tick", statuses=["completed"]) >= 2
    try:
        await wait_for(two_ran, timeout=20, what="two occurrences to complete")
    finally:
        await asyncio.wait_for(worker.drain(grace=0), 10)
        await running
    recorded = spans.spans()
    (seed,) = [s for s in recorded if s["name"] == "send trace.tick" and s["parent"] is None]
    assert seed["kind"] == "PRODUCER" and seed["attributes"] == {
        "messaging.system": "venturi", "messaging.operation.type": "send",
        "messaging.operation.name": "send", "messaging.destination.name": "trace.tick",
        "messaging.batch.message_count": 1}
    runs = sorted((s for s in recorded if s["name"] == "process trace.tick"),
                  key=lambda s: s["start"])
    assert len(runs) >= 2
    # Each run links to the span that sent its occurrence: the seed, then its
    # predecessor's successor span, a child of the predecessor's run.
    sender = seed
    for run in runs:
        assert run["links"] == [[sender["trace_id"], sender["span_id"], {}]]
        if run["attributes"]["messaging.venturi.outcome"] != "completed":
            assert run is runs[-1]  # released by the drain: no successor yet
            break
        (sender,) = [s for s in recorded if s["parent"] == run["span_id"]]
        assert (sender["name"], sender["kind"], sender["trace_id"]) == (
            "send trace.tick", "PRODUCER", run["trace_id"])
        occurrence = await queue.job(sender["attributes"]["messaging.message.id"])
        assert occurrence is not None and occurrence.trace_context is not None
        assert occurrence.trace_context["traceparent"] == traceparent(sender)
