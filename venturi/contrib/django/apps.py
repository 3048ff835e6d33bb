"""The Django app: management commands, and venturi's tables with ``manage.py migrate``.

After every ``migrate`` of a database (the test runner's ``test_*`` databases too),
each ``VenturiBackend`` writing to that database brings its tables up to date:
venturi's migrations are idempotent and take a lock, so running them on every
``migrate`` is safe and cheap once applied.
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def venturi_backends() -> list[Any]:
    """Every configured VenturiBackend, by alias order."""
    from django.tasks import task_backends

    from .backend import VenturiBackend

    return [b for b in task_backends.all() if isinstance(b, VenturiBackend)]


def migrate_venturi(sender: AppConfig, *, using: str, verbosity: int = 1, **kwargs: Any) -> None:
    for backend in venturi_backends():
        if backend.database != using:
            continue
        applied = backend.migrate()
        if verbosity >= 1 and applied:
            print(f"  venturi ({backend.prefix}): applied {', '.join(applied)}")


class VenturiConfig(AppConfig):
    name = "venturi.contrib.django"
    label = "venturi"
    verbose_name = "venturi"

    def ready(self) -> None:
        post_migrate.connect(migrate_venturi, sender=self, dispatch_uid="venturi-migrate")
