"""Recording spans with the OpenTelemetry SDK, and spans as plain data to compare.

OpenTelemetry lets a process set its tracer provider once; ``install`` resets that
guard between tests, as opentelemetry-test-utils' ``reset_trace_globals`` does, so each
test records into a fresh in-memory exporter and the others run with no provider.
"""

from __future__ import annotations

from typing import Any

import opentelemetry.trace as api
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def install(provider: TracerProvider | None) -> None:
    """Make ``provider`` the global tracer provider (None: back to none set)."""
    api._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    api._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    if provider is not None:
        api.set_tracer_provider(provider)


def recording() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def hex_ids(context: Any) -> tuple[str, str]:
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def as_data(span: ReadableSpan) -> dict[str, Any]:
    """What the tests compare of a finished span, in JSON-able form (a worker process
    writes its spans so, and the test reads them back)."""
    trace_id, span_id = hex_ids(span.context)
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": trace_id,
        "span_id": span_id,
        "flags": f"{span.context.trace_flags:02x}",
        "parent": None if span.parent is None else hex_ids(span.parent)[1],
        "links": [[*hex_ids(link.context), dict(link.attributes or {})] for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "description": span.status.description,
        "start": span.start_time,
        "exceptions": [dict(e.attributes or {}).get("exception.type") for e in span.events
                       if e.name == "exception"],
    }


def traceparent(span: dict[str, Any]) -> str:
    """The span's W3C traceparent, as the job stores it."""
    return f"00-{span['trace_id']}-{span['span_id']}-{span['flags']}"
