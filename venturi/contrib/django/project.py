"""A Django project as the worker and the CLI see it: set up once per process, its
VenturiBackend chosen, and what a worker for it runs and connects to."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import django
from django.apps import apps

from ...errors import ConfigError
from ...queue import Queue
from ...task import Task
from ...worker.config import WorkerConfig, default_name
from .apps import venturi_backends
from .backend import VenturiBackend
from .runner import RunnerState, job_classes
from .runner import lifespan as runner_lifespan
from .settings import backend_dsn


@dataclass(frozen=True, slots=True)
class Project:
    backend: VenturiBackend
    tasks: list[type[Task]]
    dsn: str


def setup(settings_module: str | None = None) -> None:
    """``django.setup()`` for ``settings_module`` (else ``DJANGO_SETTINGS_MODULE``),
    unless Django is set up already (a management command). The working directory
    is on ``sys.path``, as ``manage.py`` has it."""
    if apps.ready:
        return
    if settings_module:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    elif not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ConfigError("no Django settings: give --django SETTINGS or set "
                          "DJANGO_SETTINGS_MODULE")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    django.setup()


def choose(prefix: str | None = None) -> VenturiBackend:
    """The backend serving ``prefix``; without one, TASKS' ``default`` alias if it is a
    VenturiBackend, else the only VenturiBackend."""
    backends: list[VenturiBackend] = venturi_backends()
    if not backends:
        raise ConfigError("settings.TASKS has no backend 'venturi.contrib.django.VenturiBackend'")
    if prefix is not None:
        for backend in backends:
            if backend.prefix == prefix:
                return backend
        raise ConfigError(f"no VenturiBackend in settings.TASKS has prefix {prefix!r} "
                          f"(they have: {', '.join(b.prefix for b in backends)})")
    by_alias = {b.alias: b for b in backends}
    if "default" in by_alias:
        return by_alias["default"]
    if len(backends) == 1:
        return backends[0]
    raise ConfigError(f"settings.TASKS has several VenturiBackends ({', '.join(by_alias)}): "
                      "choose one with --prefix")


def load(settings_module: str | None = None, prefix: str | None = None) -> Project:
    setup(settings_module)
    backend = choose(prefix)
    return Project(backend, job_classes(backend), backend_dsn(backend))


def lifespan(queue: Queue, backend: VenturiBackend, config: WorkerConfig
             ) -> Callable[[], AbstractAsyncContextManager[RunnerState]]:
    """The worker's lifespan for Django jobs: their threads (as many as the worker's
    concurrency) and the worker id Django's ``worker_ids`` show."""
    return runner_lifespan(queue, backend, concurrency=config.concurrency,
                           worker_id=config.name or default_name())


__all__ = ["Project", "VenturiBackend", "choose", "lifespan", "load", "setup"]
