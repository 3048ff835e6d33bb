"""Enqueue on Django's own connection: a view's transaction commits or rolls back the
order and its job together; outside a transaction it is one autocommitted insert."""

from __future__ import annotations

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: .ci/run runs "
                    "tests/django in a 3.12 virtualenv")

import json

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.tasks import default_task_backend
from django.test import TestCase, TransactionTestCase, override_settings
from shop.models import Order
from shop.tasks import ping, record, send_receipt

from tests.django.helpers import clear_jobs, committed_jobs
from venturi import SchemaMissing

RECEIPT = "shop.tasks.send_receipt"


class ViewTransactionTests(TransactionTestCase):
    """Real commits: another session sees exactly what Django committed."""

    def tearDown(self) -> None:
        clear_jobs()

    def test_a_committed_view_leaves_the_order_and_one_job(self) -> None:
        response = self.client.post("/orders/", {"item": "tea", "quantity": "2"})
        self.assertEqual(response.status_code, 201)
        body = json.loads(response.content)
        order = Order.objects.get(pk=body["order"])
        self.assertEqual(order.receipt_task, body["task"])
        self.assertEqual(committed_jobs(RECEIPT), [(body["task"], "django:emails", "pending")])

    def test_a_rolled_back_view_leaves_neither(self) -> None:
        response = self.client.post("/orders/", {"item": "", "quantity": "2"})
        self.assertEqual(response.status_code, 400)
        self.assertFalse(Order.objects.exists())
        self.assertEqual(committed_jobs(), [])

    def test_the_job_is_invisible_until_the_commit(self) -> None:
        with transaction.atomic():
            result = record.enqueue("inside")
            self.assertEqual(committed_jobs(), [])  # another session: nothing yet
            # Django's own connection sees its transaction's job.
            self.assertEqual(record.get_result(result.id).status, "READY")
        self.assertEqual(committed_jobs(), [(result.id, "django:default", "pending")])

    def test_a_rolled_back_savepoint_drops_the_job_and_keeps_the_rest(self) -> None:
        with transaction.atomic():
            kept = Order.objects.create(item="jam", quantity=1)
            try:
                with transaction.atomic():
                    send_receipt.enqueue(kept.pk)
                    raise RuntimeError("undo the inner block")
            except RuntimeError:
                pass
            outer = record.enqueue("outer")
        self.assertTrue(Order.objects.filter(pk=kept.pk).exists())
        self.assertEqual(committed_jobs(), [(outer.id, "django:default", "pending")])

    def test_outside_a_transaction_it_is_one_autocommitted_insert(self) -> None:
        result = record.enqueue("alone")
        self.assertEqual(committed_jobs(), [(result.id, "django:default", "pending")])

    def test_an_async_view_enqueues_with_aenqueue(self) -> None:
        response = self.client.get("/ping/", {"word": "hi"})
        self.assertEqual(response.status_code, 202)
        task_id = json.loads(response.content)["task"]
        self.assertEqual(committed_jobs("shop.tasks.ping"),
                         [(task_id, "django:default", "pending")])

    def test_a_failed_enqueue_marks_the_transaction_for_rollback(self) -> None:
        tasks = {**settings.TASKS, "unmigrated": {
            "BACKEND": "venturi.contrib.django.VenturiBackend", "OPTIONS": {"prefix": "nope_"}}}
        with (override_settings(TASKS=tasks), self.assertRaises(TransactionManagementError),
              transaction.atomic()):
            Order.objects.create(item="tea", quantity=1)
            with self.assertRaises(SchemaMissing):
                record.using(backend="unmigrated").enqueue("lost")
            # As after a failed query of Django's own: the block must roll back.
            Order.objects.count()
        self.assertFalse(Order.objects.exists())
        self.assertEqual(committed_jobs(), [])


class InTestCaseTests(TestCase):
    """Inside django.test.TestCase's transaction, as a user's tests run."""

    async def test_aenqueue_runs_on_djangos_connection(self) -> None:
        result = await ping.aenqueue("hey")
        # Uncommitted (the test's transaction): only Django's connection sees it.
        self.assertEqual(await sync_to_async(committed_jobs)(), [])
        found = await ping.aget_result(result.id)
        self.assertEqual((found.status, found.args), ("READY", ["hey"]))

    def test_each_enqueue_writes_one_job(self) -> None:
        ids = {record.enqueue(str(i)).id for i in range(3)}
        prefix = default_task_backend.prefix
        with transaction.get_connection().cursor() as cur:
            cur.execute(f"SELECT id::text FROM {prefix}jobs")
            self.assertEqual({row[0] for row in cur.fetchall()}, ids)
