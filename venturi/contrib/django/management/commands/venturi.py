"""``python manage.py venturi COMMAND ...``: the venturi CLI on this project's queue.

``manage.py venturi migrate`` creates or updates the tables (``manage.py migrate``
does it too); ``manage.py venturi jobs``, ``job ID``, ``stats``, ``cancel``,
``retry``, ``drain``, ``workers``... are the ``venturi`` commands, connected to the
project's VenturiBackend (its DSN and prefix) unless ``--dsn`` / ``--prefix`` or
``VENTURI_DSN`` / ``VENTURI_PREFIX`` say otherwise (docs/integrations/django.md).
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ._exec import become_cli


def _option(argv: list[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


class Command(BaseCommand):
    help = ("The venturi CLI on this project's queue: migrate, jobs, job ID, stats, cancel, "
            "retry, drain, workers... (`manage.py venturi --help`).")

    def run_from_argv(self, argv: list[str]) -> None:
        from venturi.contrib.django.project import choose
        from venturi.contrib.django.settings import backend_dsn

        rest = argv[2:] or ["--help"]
        env: dict[str, str] = {}
        if rest[0] not in ("--help", "--version"):
            try:
                backend = choose(_option(rest, "--prefix") or os.environ.get("VENTURI_PREFIX"))
                # In the environment, not the arguments: a DSN may hold a password,
                # and every user of the host can read a process's arguments.
                if _option(rest, "--dsn") is None and not os.environ.get("VENTURI_DSN"):
                    env["VENTURI_DSN"] = backend_dsn(backend)
                env["VENTURI_PREFIX"] = backend.prefix
            except Exception as exc:
                raise CommandError(str(exc)) from None
        become_cli(f"{os.path.basename(argv[0])} {argv[1]}", rest, env)

    def handle(self, *args: Any, **options: Any) -> None:
        raise CommandError("run it as `python manage.py venturi COMMAND`")
