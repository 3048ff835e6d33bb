"""Producer spans (docs/operations/tracing.md): one ``send`` span per enqueue call, in the
caller's trace, whose W3C trace context every job it inserts stores; a merge links to the
job it folded into, whose context stays the creation context."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from opentelemetry import trace

from venturi import InvalidJob, Queue, SyncQueue, Workflow
from venturi.store.postgres import PostgresStore
from venturi.store.postgres.producing import COPY_MIN_ROWS

from .recording import Recorded
from .spans import traceparent
from .tasks import Keyed, Ok, Stuck

SEND = {"messaging.system": "venturi", "messaging.operation.type": "send",
        "messaging.operation.name": "send"}


@pytest.fixture(params=["injected clock", "database clock"])
def pq(request: pytest.FixtureRequest) -> Queue:
    # Both: COPY builds its rows differently when the store's clock is injected.
    fixture = "pg_store" if request.param == "injected clock" else "pg_store_dbclock"
    store: PostgresStore = request.getfixturevalue(fixture)
    return Queue(store)


async def stored_parents(queue: Queue, ids: list[Any]) -> list[str | None]:
    parents = []
    for id in ids:
        row = await queue.job(id)
        assert row is not None
        parents.append(None if row.trace_context is None else row.trace_context["traceparent"])
    return parents


async def test_enqueue_is_one_send_span_in_the_callers_trace(pq: Queue, spans: Recorded) -> None:
    with trace.get_tracer("tests").start_as_current_span("request"):
        result = await pq.enqueue(Ok())
    (request,) = spans.named("request")
    (send,) = spans.named("send trace.ok")
    assert (send["kind"], send["parent"], send["trace_id"]) == (
        "PRODUCER", request["span_id"], request["trace_id"])
    assert send["attributes"] == {**SEND, "messaging.destination.name": "trace.ok",
                                  "messaging.message.id": str(result.id),
                                  "messaging.venturi.merged": False}
    assert send["status"] == "UNSET" and send["links"] == []
    assert await stored_parents(pq, [result.id]) == [traceparent(send)]
    row = await pq.job(result.id)
    assert row is not None and row.trace_id == request["trace_id"]


@pytest.mark.parametrize("path", ["insert", "copy", "tuples"])
async def test_enqueue_many_is_one_span_for_the_batch(
        pq: Queue, spans: Recorded, path: str) -> None:
    n = {"insert": 3, "copy": COPY_MIN_ROWS, "tuples": 3}[path]
    items: list[Any] = [Ok() for _ in range(n)]
    if path == "tuples":  # (kind, payload) items take the per-job path
        items = [("trace.ok", {}) for _ in range(n)]
    ids = await pq.enqueue_many(items)
    (send,) = spans.spans()
    assert (send["name"], send["kind"], send["parent"]) == ("send trace.ok", "PRODUCER", None)
    assert send["attributes"] == {**SEND, "messaging.destination.name": "trace.ok",
                                  "messaging.batch.message_count": n}
    assert set(await stored_parents(pq, ids)) == {traceparent(send)}


async def test_a_batch_of_several_kinds_names_no_destination(
        pq: Queue, spans: Recorded) -> None:
    ids = await pq.enqueue_many([Ok(), Stuck()])
    (send,) = spans.spans()
    assert send["name"] == "send"
    assert send["attributes"] == {**SEND, "messaging.batch.message_count": 2}
    assert await stored_parents(pq, ids) == [traceparent(send)] * 2


async def test_a_merge_links_to_the_job_it_folded_into(pq: Queue, spans: Recorded) -> None:
    first = await pq.enqueue(Keyed())
    again = await pq.enqueue(Keyed())
    ids = await pq.enqueue_many([Keyed(), Keyed(key="other")])
    created, merging, batch = spans.spans()
    assert again.merged and again.id == first.id and ids[0] == first.id
    assert merging["attributes"]["messaging.message.id"] == str(first.id)
    assert merging["attributes"]["messaging.venturi.merged"] is True
    link = [created["trace_id"], created["span_id"], {"messaging.message.id": str(first.id)}]
    assert merging["links"] == [link] and batch["links"] == [link]
    # The merged job keeps its creation context; the batch's new job has the batch's.
    assert await stored_parents(pq, ids) == [traceparent(created), traceparent(batch)]


async def test_a_refused_enqueue_is_a_failed_span_and_stores_nothing(
        pq: Queue, spans: Recorded) -> None:
    with pytest.raises(InvalidJob):
        await pq.enqueue(Ok(), delay=dt.timedelta(days=-1))
    with pytest.raises(InvalidJob):
        await pq.enqueue_many([Ok(), ("trace.nobody", {})])
    one, many = spans.spans()
    for span in (one, many):
        assert span["status"] == "ERROR"
        assert span["attributes"]["error.type"] == "venturi.errors.InvalidJob"
        assert span["exceptions"] == ["venturi.errors.InvalidJob"]
    assert many["name"] == "send" and await pq.count() == 0


async def test_no_provider_no_span_and_no_context(pq: Queue) -> None:
    """The API is installed and imported, but nothing set a provider (the fixture
    ``spans`` is not used here): nothing is stored."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    one = await pq.enqueue(Ok())
    many = await pq.enqueue_many([Ok(), Ok()])
    merged = await pq.enqueue_many([Keyed(), ("trace.ok", {})])
    assert await stored_parents(pq, [one.id, *many, *merged]) == [None] * 5


def test_sync_queue_sends_in_the_callers_trace(
        pg_dsn: str, pg_store: PostgresStore, spans: Recorded) -> None:
    """SyncQueue runs Queue's coroutines on the calling thread: the same spans, in the
    trace current on that thread."""
    with SyncQueue.connect(pg_dsn, prefix=pg_store.prefix) as queue:
        with trace.get_tracer("tests").start_as_current_span("request"):
            one = queue.enqueue(Ok())
            many = queue.enqueue_many([Ok(), Ok()])
        rows = [queue.job(id) for id in [one.id, *many]]
    request, first, batch = (spans.named(n)[i] for n, i in (
        ("request", 0), ("send trace.ok", 0), ("send trace.ok", 1)))
    assert first["parent"] == batch["parent"] == request["span_id"]
    assert [r.trace_context["traceparent"] for r in rows if r and r.trace_context] == [
        traceparent(first), traceparent(batch), traceparent(batch)]


async def test_a_workflow_is_one_send_span_whose_context_every_step_stores(
        pq: Queue, spans: Recorded) -> None:
    """enqueue_workflow was once untraced: its steps ran as unlinked root spans."""
    wf = Workflow("traced")
    first = wf.add(Ok())
    wf.add(Stuck(), after=[first])
    wf.add(Ok(), after=[first])
    with trace.get_tracer("tests").start_as_current_span("request"):
        workflow_id = await pq.enqueue_workflow(wf)
    (request,) = spans.named("request")
    (send,) = spans.named("send")  # two kinds: no destination in its name
    assert (send["kind"], send["parent"], send["trace_id"]) == (
        "PRODUCER", request["span_id"], request["trace_id"])
    assert send["attributes"] == {**SEND, "messaging.batch.message_count": 3}
    state = await pq.workflow(workflow_id)
    assert state is not None
    ids = [step.id for step in state.steps]
    assert await stored_parents(pq, ids) == [traceparent(send)] * 3
