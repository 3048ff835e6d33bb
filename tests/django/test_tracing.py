"""A Django task enqueued inside a traced request stores the trace context of its
``send`` span, as ``Queue.enqueue`` does (docs/operations/tracing.md): its runs link to
the request. It once wrote the row with none, so every Django job ran as a root span."""

from __future__ import annotations

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: .ci/run runs "
                    "tests/django in a 3.12 virtualenv")

from django.tasks import default_task_backend
from django.test import TestCase
from opentelemetry import trace
from shop.tasks import record

from tests.tracing.spans import as_data, install, recording, traceparent


class TracedEnqueueTests(TestCase):
    def setUp(self) -> None:
        self.provider, self.exporter = recording()
        install(self.provider)

    def tearDown(self) -> None:
        install(None)
        self.provider.shutdown()

    def test_the_job_stores_its_send_span_s_context(self) -> None:
        with trace.get_tracer("tests").start_as_current_span("request"):
            result = record.enqueue("x")
        spans = {s["name"]: s for s in map(as_data, self.exporter.get_finished_spans())}
        request = spans["request"]
        sends = [s for name, s in spans.items() if name.startswith("send")]
        self.assertEqual(len(sends), 1)
        (send,) = sends
        self.assertEqual((send["kind"], send["parent"], send["trace_id"]),
                         ("PRODUCER", request["span_id"], request["trace_id"]))
        self.assertEqual(send["attributes"]["messaging.message.id"], result.id)
        row = default_task_backend.queue.job(result.id)
        self.assertEqual(row.trace_context["traceparent"], traceparent(send))
        self.assertEqual(row.trace_id, request["trace_id"])

    def test_without_a_tracer_provider_nothing_is_stored(self) -> None:
        install(None)
        self.assertIsNone(default_task_backend.queue.job(record.enqueue("x").id).trace_context)
