"""``manage.py venturi ...``, ``manage.py venturi_worker`` and ``venturi worker --django``
as an operator types them: their output, and one line for bad input."""

from __future__ import annotations

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: .ci/run runs "
                    "tests/django in a 3.12 virtualenv")

import json
import subprocess
import sys

from django.test import TransactionTestCase
from shop.tasks import record

from tests.django.conftest import EXAMPLE
from tests.django.helpers import clear_jobs, worker_env

VENTURI = [sys.executable, "-c", "from venturi.cli import main; main()"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=EXAMPLE, env=worker_env(), capture_output=True,
                          text=True, timeout=60, check=False)


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    return run(sys.executable, "manage.py", *args)


class CommandTests(TransactionTestCase):
    def tearDown(self) -> None:
        clear_jobs()

    def test_venturi_migrate(self) -> None:
        done = manage("venturi", "migrate")
        self.assertEqual((done.returncode, done.stdout.strip()),
                         (0, "schema is up to date (prefix venturi_)"), done.stderr)

    def test_venturi_jobs_lists_the_projects_jobs(self) -> None:
        result = record.enqueue("listed")
        done = manage("venturi", "jobs", "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        (listed,) = json.loads(done.stdout)["jobs"]
        self.assertEqual((listed["id"], listed["kind"], listed["subject"]),
                         (result.id, "django:default", "shop.tasks.record"))

    def test_bad_input_gets_one_line(self) -> None:
        cases = {
            ("--django", "nosuch.settings"): (
                1, "venturi: error: --django nosuch.settings: no module named 'nosuch' "
                   "(is it on PYTHONPATH?)"),
            ("--django", "shop.settings", "--kinds", "nope"): (
                1, "venturi: error: --kinds: unknown kind 'nope'; shop.settings defines: "
                   "django:default, django:emails"),
            (): (2, "venturi: error: give --app MODULE (venturi tasks) or --django SETTINGS "
                    "(Django tasks)"),
        }
        for args, (code, line) in cases.items():
            with self.subTest(args):
                done = run(*VENTURI, "worker", *args)
                self.assertEqual((done.returncode, done.stderr.strip()), (code, line))

    def test_venturi_worker_takes_the_options_of_venturi_worker(self) -> None:
        done = manage("venturi_worker", "--help")
        self.assertEqual(done.returncode, 0, done.stderr)
        for option in ("--concurrency", "--kinds", "--grace", "--http", "--django"):
            self.assertIn(option, done.stdout)
