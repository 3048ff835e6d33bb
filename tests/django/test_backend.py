"""What the backend honours and what it refuses, read back through Django's API
(no worker: a job's row and result as enqueued)."""

from __future__ import annotations

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: .ci/run runs "
                    "tests/django in a 3.12 virtualenv")

import datetime as dt
import uuid
import zoneinfo

from django.conf import settings
from django.tasks import default_task_backend, task_backends
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.test import TestCase, override_settings
from django.utils import timezone
from shop.tasks import flaky, out_of_stock, record

from venturi.contrib.django import VenturiBackend

BACKEND = "venturi.contrib.django.VenturiBackend"


def job(result_id: str):  # the venturi row behind a TaskResult
    return default_task_backend.queue.job(result_id)


class HonouredTests(TestCase):
    def test_priority_maps_onto_the_three_tiers(self) -> None:
        tiers = {p: job(record.using(priority=p).enqueue(str(p)).id).priority
                 for p in (100, 1, 0, -1, -100)}
        self.assertEqual(tiers, {100: 0, 1: 0, 0: 1, -1: 2, -100: 2})

    def test_the_result_keeps_the_calls_own_options(self) -> None:
        later = timezone.now() + dt.timedelta(hours=1)
        result = record.using(priority=42, run_after=later).enqueue("x")
        found = record.get_result(result.id)
        self.assertEqual((found.task.priority, found.task.run_after, found.task.queue_name),
                         (42, later, "default"))
        self.assertEqual(found.args, ["x"])

    def test_run_after_is_when_the_job_becomes_visible(self) -> None:
        later = timezone.now() + dt.timedelta(hours=1)
        self.assertEqual(job(record.using(run_after=later).enqueue("x").id).visible_at, later)

    @override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris")
    def test_a_naive_run_after_is_local_time_without_use_tz(self) -> None:
        naive = dt.datetime(2031, 1, 2, 3, 4, 5)
        row = job(record.using(run_after=naive).enqueue("x").id)
        # Read as an aware datetime although Django loads naive ones with USE_TZ=False.
        self.assertEqual(row.visible_at, naive.replace(tzinfo=zoneinfo.ZoneInfo("Europe/Paris")))

    def test_queue_name_is_the_kind(self) -> None:
        self.assertEqual(job(record.using(queue_name="emails").enqueue("x").id).kind,
                         "django:emails")

    def test_the_failure_budget_is_one_unless_the_task_says(self) -> None:
        self.assertEqual(job(out_of_stock.enqueue("tea").id).max_failures, 1)
        self.assertEqual(job(flaky.enqueue("x").id).max_failures, 3)

    def test_the_backends_max_failures_option_is_the_default_budget(self) -> None:
        """OPTIONS["max_failures"] is the budget of a task that sets none, and a task's own
        budget still wins over it (docs/integrations/django.md, "failure budget")."""
        default = settings.TASKS["default"]
        tasks = {**settings.TASKS, "budget": {
            **default, "OPTIONS": {**default["OPTIONS"], "max_failures": 3}}}
        with override_settings(TASKS=tasks):
            backend = task_backends["budget"]
            plain = backend.queue.job(out_of_stock.using(backend="budget").enqueue("tea").id)
            own = VenturiBackend.task_class(func=record.func, backend="budget", max_failures=5)
            mine = backend.queue.job(own.enqueue("x").id)
        self.assertEqual((plain.max_failures, mine.max_failures), (3, 5))

    def test_a_ready_result(self) -> None:
        result = record.enqueue("x")
        self.assertEqual(result.status, "READY")
        found = record.get_result(result.id)
        self.assertEqual((found.status, found.attempts, found.errors, found.started_at,
                          found.finished_at), ("READY", 0, [], None, None))
        self.assertEqual(found.enqueued_at, job(result.id).created_at)
        with self.assertRaisesMessage(ValueError, "not finished"):
            _ = found.return_value
        result.refresh()
        self.assertEqual(result.status, "READY")


class RefusedTests(TestCase):
    def test_unknown_results(self) -> None:
        for bad in ("not-a-uuid", str(uuid.uuid4())):
            with self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(bad)

    def test_a_result_of_another_task(self) -> None:
        with self.assertRaises(TaskResultMismatch):
            out_of_stock.get_result(record.enqueue("x").id)

    def test_arguments_that_are_not_json_write_nothing(self) -> None:
        with self.assertRaises(TypeError):
            record.enqueue(object())
        self.assertEqual(default_task_backend.queue.count(), 0)

    def test_what_validate_task_refuses(self) -> None:
        far = timezone.now() + dt.timedelta(days=3651)
        cases = {
            "run_after is more than": lambda: record.using(run_after=far),
            "not valid for backend": lambda: record.using(queue_name="nowhere"),
            "max_failures must be an int": lambda: VenturiBackend.task_class(
                func=record.func, max_failures=0),
            "priority must be": lambda: record.using(priority=101),
        }
        for message, make in cases.items():
            with self.subTest(message), self.assertRaisesMessage(InvalidTask, message):
                make()

    def test_bad_options_are_refused_when_the_backend_is_built(self) -> None:
        cases = {
            "unknown option 'prefx'": {"OPTIONS": {"prefx": "x_"}},
            "prefix": {"OPTIONS": {"prefix": "Bad-Prefix"}},
            "QUEUES'] is empty": {"QUEUES": []},
            "max_failures": {"OPTIONS": {"max_failures": 0}},
            "lease": {"OPTIONS": {"lease": 0.1}},
        }
        for message, params in cases.items():
            with self.subTest(message), self.assertRaisesMessage(InvalidTaskBackend, message):
                VenturiBackend("broken", {"BACKEND": BACKEND, **params})

    def test_system_checks(self) -> None:
        self.assertEqual(default_task_backend.check(), [])
        tasks = {**settings.TASKS, "elsewhere": {
            "BACKEND": BACKEND, "OPTIONS": {"database": "missing"}}}
        with override_settings(TASKS=tasks):
            errors = task_backends["elsewhere"].check()
        self.assertEqual([e.id for e in errors], ["venturi.E001"])


class DsnTests(TestCase):
    """Where workers connect when OPTIONS has no dsn: the DATABASES entry, as a URI."""

    def test_the_entry_as_a_uri(self) -> None:
        from venturi.contrib.django.settings import dsn_of

        entry = {"NAME": "shop db", "USER": "app", "PASSWORD": "p@ss:/word", "HOST": "db.internal",
                 "PORT": "6432", "OPTIONS": {"sslmode": "require", "pool": True,
                                             "options": "-c search_path=shop,public"}}
        self.assertEqual(
            dsn_of("default", entry),
            "postgresql://app:p%40ss%3A%2Fword@db.internal:6432/shop%20db"
            "?sslmode=require&search_path=shop%2Cpublic")
        socket = {"NAME": "shop", "USER": "", "HOST": "/run/postgresql", "PORT": "5433",
                  "OPTIONS": {}}
        self.assertEqual(dsn_of("default", socket),
                         "postgresql:///shop?host=%2Frun%2Fpostgresql&port=5433")

    def test_what_a_uri_cannot_say_is_refused(self) -> None:
        from django.core.exceptions import ImproperlyConfigured

        from venturi.contrib.django.settings import dsn_of

        for options in ({"service": "shop"}, {"options": "-X"}):
            with self.subTest(options), self.assertRaisesMessage(ImproperlyConfigured,
                                                                 "OPTIONS['dsn']"):
                dsn_of("default", {"NAME": "shop", "OPTIONS": options})
