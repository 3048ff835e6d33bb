"""``python manage.py venturi_worker [options of venturi worker]``: a worker for this
project's Django tasks (docs/integrations/django.md)."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ._exec import become_cli


class Command(BaseCommand):
    help = ("Run a venturi worker for this project's Django tasks. Takes the options of "
            "`venturi worker` (--concurrency, --kinds, --name, --grace, --http, ...).")

    def run_from_argv(self, argv: list[str]) -> None:
        # `venturi worker --django SETTINGS` parses its own options: they are the same
        # here as there, and it sets Django up once, in the process that runs the jobs.
        module = settings.SETTINGS_MODULE or os.environ.get("DJANGO_SETTINGS_MODULE", "")
        become_cli(f"{os.path.basename(argv[0])} {argv[1]}",
                   ["worker", "--django", module, *argv[2:]])

    def handle(self, *args: Any, **options: Any) -> None:  # call_command() lands here
        raise CommandError("run it as `python manage.py venturi_worker`: it runs until drained")
