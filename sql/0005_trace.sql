-- venturi schema, version 5: the trace context a job was enqueued under.
--
-- {"traceparent": ..., "tracestate": ...}: the W3C trace context of the span that
-- enqueued the job, stored by venturi[otel] while an application traces
-- (docs/operations/tracing.md); each run's span links to it. NULL when nothing traced
-- the enqueue. Nullable without a default, so adding it rewrites no row.
ALTER TABLE {prefix}jobs ADD COLUMN IF NOT EXISTS trace_context jsonb;
