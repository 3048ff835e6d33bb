"""``--django SETTINGS``: the Django project a worker runs the tasks of, set up in
this process (venturi.contrib.django; docs/integrations/django.md)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import venturi

from .session import fail

if TYPE_CHECKING:
    from venturi.contrib.django.project import Project, VenturiBackend

Lifespan = Callable[[], AbstractAsyncContextManager[Any]]

INSTALL = "--django needs Django 6 (Python 3.12 or later): pip install 'venturi[django]'"


def load(settings_module: str, prefix: str | None) -> Project:
    """The project's backend, its queues' task classes and its DSN; one line on failure."""
    try:
        from venturi.contrib.django.project import load as load_project
    except ImportError as exc:
        fail(f"{INSTALL} ({exc})")
    try:
        return load_project(settings_module, prefix)
    except ModuleNotFoundError as exc:
        fail(f"--django {settings_module}: no module named {exc.name!r} (is it on PYTHONPATH?)")
    except Exception as exc:
        fail(f"--django {settings_module}: {type(exc).__name__}: {exc}")



def lifespan(queue: venturi.Queue, backend: VenturiBackend, config: venturi.WorkerConfig
             ) -> Lifespan:
    """The worker's lifespan for Django jobs (their thread pool, their worker id)."""
    from venturi.contrib.django.project import lifespan as project_lifespan

    return project_lifespan(queue, backend, config)
