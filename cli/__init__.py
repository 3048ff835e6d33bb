"""The ``venturi`` command line, shipped as ``venturi.cli``. A thin shell over
venturi's public API: the library never imports this package."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import app

__all__ = ["app", "main"]


def main() -> Any:
    """Console-script entry point. SIGTERM and SIGINT are recorded from here on, before
    the driver, the worker and Typer are imported (a few hundred milliseconds): an
    orchestrator may signal a worker at any moment of its start, and it must drain,
    not die (docs/operations/deploys.md). Commands other than ``venturi worker`` get
    the signals back, with any that arrived, as soon as the command is known."""
    from venturi.worker.signals import STOP_SIGNALS

    STOP_SIGNALS.install()
    _load()
    from .app import main as run

    return run()


def _load() -> Any:
    """The Typer application, bound as this package's ``app``: importing the submodule
    of the same name binds the module there first."""
    import importlib

    module = importlib.import_module(".app", __name__)
    globals()["app"] = module.app
    return module.app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
