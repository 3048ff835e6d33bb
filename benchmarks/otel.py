"""Tracing set up the way an application would, for the tracing benchmarks.

``enable(mode)``: ``off`` leaves OpenTelemetry unimported (an application without
it); ``api`` imports the API and sets no provider (a library pulled it in, nothing
traces); ``sdk`` sets the SDK's tracer provider with a batch span processor and an
exporter that drops every span, so the figure is venturi's spans and the SDK's
bookkeeping, not an exporter's network.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MODES = ("off", "api", "sdk")


def enable(mode: str) -> Any:
    """Set tracing up as ``mode`` says; returns the provider to shut down (or None)."""
    if mode not in MODES:
        raise ValueError(f"tracing mode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "off":
        return None
    from opentelemetry import trace

    if mode == "api":
        return None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    return provider
