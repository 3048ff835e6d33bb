"""The venturi dashboard: an ASGI application to serve with ``venturi web`` or to
mount in your own Starlette, FastAPI or Django-ASGI application.

Needs the ``web`` extra (``pip install 'venturi[web]'``); ``import venturi``
never imports this package. See docs/operations/dashboard.md.
"""

from __future__ import annotations

EXTRA_HINT = "the dashboard needs the web extra: pip install 'venturi[web]'"

try:
    import jinja2  # noqa: F401
    import python_multipart  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a venv without the extra
    raise ImportError(f"{EXTRA_HINT} ({exc.name} is missing)", name=exc.name) from None

# After the check above, so a missing extra is named instead of a bare ImportError.
from .app import create_app, create_probe_app  # noqa: E402
from .auth import AuthHook, TokenAuth  # noqa: E402
from .dashboard import DashboardOptions  # noqa: E402
from .probes import HealthLike  # noqa: E402

__all__ = [
    "EXTRA_HINT",
    "AuthHook",
    "DashboardOptions",
    "HealthLike",
    "TokenAuth",
    "create_app",
    "create_probe_app",
]
