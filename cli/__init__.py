"""The ``venturi`` command line, shipped as ``venturi.cli``. A thin shell over
venturi's public API: the library never imports this package."""

from . import dev
from .app import app, main

dev.register(app)

__all__ = ["app", "main"]
