"""The worker: claims, runs, settles, recovers and drains (one module per service; the
file names say which: claimer, slots, executor, settler, renewer, recovery, waker, ...).

Names are imported on first use, like the package's (see ``venturi/__init__.py``): the
``venturi`` command imports :mod:`venturi.worker.signals` before anything heavy."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import WorkerConfig
    from .health import Health
    from .metrics import WorkerMetrics
    from .worker import Worker

_HOME = {"WorkerConfig": ".config", "Health": ".health", "WorkerMetrics": ".metrics",
         "Worker": ".worker"}

__all__ = ["Health", "Worker", "WorkerConfig", "WorkerMetrics"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_HOME[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
