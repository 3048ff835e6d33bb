"""OpenTelemetry traces of enqueues and runs (``venturi[otel]``; docs/operations/tracing.md).

Spans follow OpenTelemetry's semantic conventions for messaging: a job is a message,
its kind the destination, its id the message id.

- Each enqueue is one ``send`` span (kind PRODUCER) in the caller's trace, one for a
  whole ``enqueue_many``. Its W3C trace context is stored with every job it inserts
  (the ``trace_context`` column): it is the jobs' creation context. A dedup hit
  creates no message: the job it merged into keeps its creation context, and the
  send span links to it.
- Each run is one ``process`` span (kind CONSUMER) that starts a trace of its own,
  linked to the job's creation context: a job may wait hours and run many times, and
  one trace per run stays readable where one trace for all would not. The span is the
  current span while the task runs, so what the task and its libraries trace nests
  under it, and ``ctx.span`` is it.
- A periodic job's next occurrence is sent from its run (a ``send`` span, child of the
  ``process`` span); the occurrences workers seed get a ``send`` span per seed.

Nothing here runs, and nothing is stored, unless an application has set a tracer
provider: :func:`tracer` is a dictionary lookup when OpenTelemetry was never
imported, and the callers take their untraced path when it returns None.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson

from .errors import classify
from .store import lifecycle
from .store.records import Enqueued, JobRecord, MergeFn, MergeUpdate, NewJob
from .store.settlements import Settlement
from .store.statuses import Outcome

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext, Tracer

# Attribute names: the messaging conventions', then venturi's own, under the
# ``messaging.{system}`` namespace the conventions reserve for a system's attributes.
SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
BATCH_COUNT = "messaging.batch.message_count"
CLIENT_ID = "messaging.client.id"
ERROR_TYPE = "error.type"
RUN_NUMBER = "messaging.venturi.run_number"
OUTCOME = "messaging.venturi.outcome"
MERGED = "messaging.venturi.merged"

CANCELLED = "cancelled"  # the job was deleted while it ran (docs/concepts/leases.md)
LEASE_LOST = "lease-lost"  # the claim was lost: another worker or the reaper decides

_provider: Any = None  # the tracer provider _tracer was made from
_tracer: Tracer | None = None


def tracer() -> Tracer | None:
    """venturi's tracer, or None while no tracer provider is set (or OpenTelemetry's
    SDK is disabled). Without ``opentelemetry.trace`` in ``sys.modules`` nobody can
    have set a provider, so nothing is imported to find that out."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if provider is not _provider:
        _adopt(provider)
    return _tracer


def _adopt(provider: Any) -> None:
    global _provider, _tracer
    from importlib.metadata import PackageNotFoundError, version

    from opentelemetry.trace import NoOpTracer, NoOpTracerProvider, ProxyTracerProvider

    found: Tracer | None = None
    if not isinstance(provider, ProxyTracerProvider | NoOpTracerProvider):
        try:
            release = version("venturi")
        except PackageNotFoundError:  # pragma: no cover - a source tree
            release = None
        found = provider.get_tracer("venturi", release)
        if isinstance(found, NoOpTracer):
            found = None
    _provider, _tracer = provider, found


# --- the creation context, as stored --------------------------------------------------


def _carrier(span: Span) -> str | None:
    """The span's W3C trace context (``traceparent``, ``tracestate``) as JSON text, the
    form the ``trace_context`` column holds; None when the span has no valid context."""
    from opentelemetry.trace import set_span_in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, set_span_in_context(span))
    return orjson.dumps(carrier).decode() if carrier else None


def creation_context(job: JobRecord) -> SpanContext | None:
    """The job's stored creation context, or None (never traced, or not readable: a
    value written by other software is ignored, not trusted)."""
    carrier = job.trace_context
    if not isinstance(carrier, dict):
        return None
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    text = {k: v for k, v in carrier.items() if isinstance(k, str) and isinstance(v, str)}
    found = get_current_span(TraceContextTextMapPropagator().extract(text)).get_span_context()
    return found if found.is_valid else None


# --- producer spans -------------------------------------------------------------------


class Send:
    """One ``send`` span: ``context`` is what the jobs it sends store."""

    __slots__ = ("_merged", "context", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.context = _carrier(span)
        self._merged: dict[UUID, SpanContext] = {}

    def merging(self, merge: MergeFn) -> MergeFn:
        """``merge``, noting the creation context of each job it folds a new one into."""
        def merge_noting(new: NewJob, pending: JobRecord) -> MergeUpdate | None:
            update = merge(new, pending)
            found = None if update is None else creation_context(pending)
            if found is not None:
                self._merged[pending.id] = found
            return update
        return merge_noting

    def sent(self, results: Sequence[Enqueued]) -> None:
        """Link to the jobs the new ones merged into; for a single job, name it."""
        if len(results) == 1:
            self.span.set_attribute(MESSAGE_ID, str(results[0].id))
            self.span.set_attribute(MERGED, results[0].merged)
        for result in results:
            found = self._merged.get(result.id) if result.merged else None
            if found is not None:
                self.span.add_link(found, {MESSAGE_ID: str(result.id)})
                del self._merged[result.id]  # one link per job, however many merged into it


@contextmanager
def send(tracer: Tracer, kinds: Collection[str], count: int | None = None) -> Iterator[Send]:
    """A ``send`` span around an insert, current while it runs (the driver's own spans
    nest under it). ``kinds`` name the destination when there is one; ``count`` is a
    batch's size (None for ``enqueue``, a single-message API)."""
    from opentelemetry.trace import SpanKind

    kind = next(iter(kinds)) if len(kinds) == 1 else None
    attributes: dict[str, str | int] = {SYSTEM: "venturi", OPERATION_TYPE: "send",
                                        OPERATION_NAME: "send"}
    if kind is not None:
        attributes[DESTINATION] = kind
    if count is not None:
        attributes[BATCH_COUNT] = count
    with tracer.start_as_current_span("send" if kind is None else f"send {kind}",
                                      kind=SpanKind.PRODUCER, attributes=attributes) as span:
        try:
            yield Send(span)
        except Exception as exc:
            span.set_attribute(ERROR_TYPE, classify(exc))
            raise  # the span records it and sets its status


def task_kinds(items: Sequence[Any]) -> set[str]:
    """The kinds of ``enqueue_many``'s items, for its span's name (a bad item is
    refused later, naming its index)."""
    kinds = set()
    for item in items:
        options = getattr(type(item), "__task__", None)
        if options is not None:
            kinds.add(options.kind)
        elif isinstance(item, tuple) and item and isinstance(item[0], str):
            kinds.add(item[0])
    return kinds


# --- consumer spans -------------------------------------------------------------------


class Run:
    """One ``process`` span: the run's outcome and failure go on it."""

    __slots__ = ("_error", "_record", "_tracer", "span")

    def __init__(self, tracer: Tracer, span: Span, record: JobRecord) -> None:
        self.span = span
        self._tracer = tracer
        self._record = record
        self._error: str | None = None

    def failed(self, exc: BaseException, classification: str) -> None:
        """The task raised (or its payload did not decode): recorded on the span."""
        self.span.record_exception(exc)
        self._error = classification

    def settled(self, settlement: Settlement | None, cancelled: bool) -> Settlement | None:
        """Name the outcome (what the settlement does under venturi.store.lifecycle, or
        why there is none), mark a failure, and send a periodic job's successor."""
        from opentelemetry.trace import StatusCode

        span, record = self.span, self._record
        if settlement is None:
            outcome = CANCELLED if cancelled else LEASE_LOST
            note = None if cancelled else LEASE_LOST
        else:
            outcome = lifecycle.settle(settlement.action, record.failure_count,
                                       record.max_failures).outcome.value
            note = settlement.note if outcome in (Outcome.RETRIED, Outcome.DEAD) else None
        span.set_attribute(OUTCOME, outcome)
        if note is not None:
            span.set_attribute(ERROR_TYPE, self._error or note)
            span.set_status(StatusCode.ERROR, note)
        if settlement is not None and settlement.successor is not None:
            successor = _send_successor(self._tracer, record.kind, settlement.successor[0])
            return dataclasses.replace(settlement, successor_trace=successor)
        return settlement


def _send_successor(tracer: Tracer, kind: str, id: UUID) -> str | None:
    """The ``send`` span of a periodic job's next occurrence, which the settle inserts;
    a child of the run's span (current when this is called)."""
    from opentelemetry.trace import SpanKind

    with tracer.start_as_current_span(f"send {kind}", kind=SpanKind.PRODUCER, attributes={
            SYSTEM: "venturi", OPERATION_TYPE: "send", OPERATION_NAME: "send",
            DESTINATION: kind, MESSAGE_ID: str(id)}) as span:
        return _carrier(span)


@contextmanager
def process(tracer: Tracer, record: JobRecord) -> Iterator[Run]:
    """The ``process`` span of one run: a new trace, linked to the job's creation
    context, current until the run ends."""
    from opentelemetry import context
    from opentelemetry.trace import Link, SpanKind, set_span_in_context

    created = creation_context(record)
    attributes: dict[str, str | int] = {
        SYSTEM: "venturi", OPERATION_TYPE: "process", OPERATION_NAME: "process",
        DESTINATION: record.kind, MESSAGE_ID: str(record.id), RUN_NUMBER: record.run_count}
    if record.claimed_by is not None:
        attributes[CLIENT_ID] = record.claimed_by
    span = tracer.start_span(
        f"process {record.kind}", context.Context(), kind=SpanKind.CONSUMER,
        attributes=attributes, links=None if created is None else [Link(created)])
    token = context.attach(set_span_in_context(span))
    try:
        yield Run(tracer, span, record)
    finally:
        context.detach(token)
        span.end()
