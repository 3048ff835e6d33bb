"""Tasks run by a real worker process (``python manage.py venturi_worker``), their
results and failures read back through Django's API."""

from __future__ import annotations

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: .ci/run runs "
                    "tests/django in a 3.12 virtualenv")

import datetime as dt
import json
import tempfile
from pathlib import Path
from typing import ClassVar

from django.db import transaction
from django.tasks import default_task_backend
from django.test import TransactionTestCase
from django.utils import timezone
from shop.models import Event, Order
from shop.tasks import flaky, hold, out_of_stock, ping, record, send_receipt

from tests.django.helpers import Worker, clear_jobs, outside, until


def finished(task, result_id: str):  # the result once it is SUCCESSFUL or FAILED
    return until(lambda: (r := task.get_result(result_id)).is_finished and r,
                 what=f"task {result_id} to finish")


class WorkerTests(TransactionTestCase):
    worker: ClassVar[Worker]
    logs: ClassVar[tempfile.TemporaryDirectory[str]]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.logs = tempfile.TemporaryDirectory()
        cls.worker = Worker("--concurrency", "4", log=Path(cls.logs.name) / "worker.log")

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            assert cls.worker.stop() == 0, cls.worker.log.read_text()
        finally:
            cls.logs.cleanup()
            super().tearDownClass()

    def tearDown(self) -> None:
        clear_jobs()

    def test_an_order_request_and_its_receipt(self) -> None:
        response = self.client.post("/orders/", {"item": "tea", "quantity": "3"})
        body = json.loads(response.content)
        result = send_receipt.get_result(body["task"])
        result = finished(send_receipt, body["task"])
        self.assertEqual(result.status, "SUCCESSFUL")
        self.assertEqual(result.return_value, {"order": body["order"], "item": "tea",
                                               "quantity": 3})
        self.assertTrue(Order.objects.get(pk=body["order"]).receipt_sent)
        self.assertEqual((result.attempts, result.worker_ids, result.errors),
                         (1, [self.worker.name], []))
        self.assertLessEqual(result.enqueued_at, result.finished_at)
        self.assertIsNotNone(result.started_at)
        page = self.client.get(f"/orders/{body['order']}/").content.decode()
        self.assertIn('<dd id="status">SUCCESSFUL</dd>', page)
        self.assertIn("&#x27;item&#x27;: &#x27;tea&#x27;", page)

    def test_refresh_follows_the_job(self) -> None:
        result = record.enqueue("refreshed")
        self.assertEqual(result.status, "READY")
        until(lambda: (result.refresh(), result.is_finished)[1], what="refresh to see it finish")
        self.assertEqual((result.status, result.return_value), ("SUCCESSFUL", "refreshed"))

    def test_a_raising_task_is_failed_after_one_run(self) -> None:
        result = finished(out_of_stock, out_of_stock.enqueue("tea").id)
        self.assertEqual((result.status, result.attempts, result.worker_ids),
                         ("FAILED", 1, [self.worker.name]))
        (error,) = result.errors
        self.assertEqual(error.exception_class_path, "builtins.LookupError")
        self.assertIs(error.exception_class, LookupError)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            _ = result.return_value
        # A classification, never the message (which could hold user data).
        prefix = default_task_backend.prefix
        stored = outside(f"SELECT note, attachment::text FROM {prefix}journal "
                         "WHERE job_id = %s::uuid", result.id)
        self.assertNotIn("no tea left", repr(stored))

    def test_takes_context_and_a_tasks_own_budget(self) -> None:
        result = finished(flaky, flaky.enqueue("payment").id)
        self.assertEqual((result.status, result.return_value, result.attempts),
                         ("SUCCESSFUL", 2, 2))
        self.assertEqual([e.exception_class_path for e in result.errors],
                         ["builtins.ConnectionError"])
        self.assertEqual(list(Event.objects.order_by("id").values_list("label", "attempt")),
                         [("payment", 1), ("payment", 2)])
        self.assertLessEqual(result.started_at, result.last_attempted_at)

    def test_an_async_task_runs(self) -> None:
        result = finished(ping, ping.enqueue("hello").id)
        self.assertEqual(result.return_value, "HELLO")
        self.assertTrue(Event.objects.filter(label="ping:hello").exists())

    def test_a_running_task_is_running(self) -> None:
        result = hold.enqueue("a")
        running = until(lambda: (r := hold.get_result(result.id)).status == "RUNNING" and r,
                        what="the task to be running")
        self.assertEqual((running.attempts, running.worker_ids, running.finished_at),
                         (1, [self.worker.name], None))
        Event.objects.create(label="release:a")
        self.assertEqual(finished(hold, result.id).return_value, "a")

    def test_run_after_holds_a_job_back(self) -> None:
        later = record.using(run_after=timezone.now() + dt.timedelta(hours=1)).enqueue("later")
        now = record.enqueue("now")
        self.assertEqual(finished(record, now.id).return_value, "now")
        # The worker claimed the job enqueued after it: the deferred one was passed over.
        self.assertEqual(record.get_result(later.id).status, "READY")
        self.assertFalse(Event.objects.filter(label="later").exists())


class PriorityTests(TransactionTestCase):
    def tearDown(self) -> None:
        clear_jobs()

    def test_higher_priorities_are_claimed_first(self) -> None:
        with transaction.atomic():  # all visible at once, at the commit
            ids = [record.using(priority=p).enqueue(label).id
                   for p, label in ((0, "normal"), (50, "high"), (10, "higher-but-later"))]
        with tempfile.TemporaryDirectory() as logs:
            # One slot: one claim at a time, by priority (the console script this time).
            worker = Worker("--concurrency", "1", cli=True, log=Path(logs) / "worker.log")
            try:
                for task_id in ids:
                    finished(record, task_id)
            finally:
                self.assertEqual(worker.stop(), 0)
        # Django's 50 and 10 are one tier (HIGH): in it, oldest first.
        self.assertEqual(list(Event.objects.order_by("id").values_list("label", flat=True)),
                         ["high", "higher-but-later", "normal"])
