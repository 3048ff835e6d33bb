"""The ``venturi`` command line, shipped as ``venturi.cli``. A thin shell over
venturi's public API: the library never imports this package."""

from .app import app, main

__all__ = ["app", "main"]
