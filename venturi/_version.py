"""The installed distribution's version, read once."""

from __future__ import annotations

from functools import cache


@cache
def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("venturi")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"
