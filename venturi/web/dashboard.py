"""What every page handler of the dashboard shares (:class:`Dashboard`), and its options.

Apart from ``app.py`` so that the route modules (``pages``, ``jobs``, ``streams``,
``actions``) can use it while ``app.py`` imports them: imports flow one way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from venturi._version import package_version
from venturi.queue import Queue
from venturi.task import Task, registered

from . import format as fmt
from .auth import Access, csrf_token
from .live import Hub

# The pages, in nav order: (endpoint name, label). A workflow's page has no entry: a
# job of one links to it.
NAV: tuple[tuple[str, str], ...] = (
    ("overview", "Overview"),
    ("jobs", "Jobs"),
    ("kinds", "Kinds"),
    ("workers", "Workers"),
    ("periodic", "Periodic"),
)

@dataclass(frozen=True, kw_only=True, slots=True)
class DashboardOptions:
    """How the dashboard refreshes and what it knows beyond the database.

    ``refresh``: seconds between stats refreshes while someone watches (a
    NOTIFY refreshes sooner). ``sample_interval``: seconds between the chart
    samples kept for the last hour. ``tasks``: the task classes whose periodic
    schedules the periodic page shows (default: every task imported in this
    process). ``secure_cookie``: mark the session cookie Secure (serve over
    HTTPS). ``session_secret``: the cookie signing key when it should not be
    derived from the token (an auth hook without a token gets a random one).
    """

    refresh: float = 2.0
    sample_interval: float = 10.0
    tasks: Sequence[type[Task]] | None = None
    secure_cookie: bool = False
    session_secret: str | None = None

    def __post_init__(self) -> None:
        if not 0.1 <= self.refresh <= 3600:
            raise ValueError("refresh must be between 0.1 and 3600 seconds")
        if not 1 <= self.sample_interval <= 600:
            raise ValueError("sample_interval must be between 1 and 600 seconds")


class Dashboard:
    """What every page handler shares: the queue, the live hub, access, templates."""

    def __init__(self, queue: Queue, access: Access, options: DashboardOptions) -> None:
        self.queue = queue
        self.access = access
        self.options = options
        self.hub = Hub(queue, refresh=options.refresh, sample_interval=options.sample_interval)
        self.periodic_cache: tuple[Any, Any] | None = None  # see pages.periodic_cached
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("venturi.web", "templates"),
            autoescape=True,  # every template: everything shown from the database is user data
            undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True,
        )
        fmt.install(self.templates)

    def periodic_tasks(self) -> list[type[Task]]:
        tasks = self.options.tasks
        if tasks is None:
            tasks = list(registered().values())
        return sorted((t for t in tasks if t.__task__.periodic), key=lambda t: t.__task__.kind)

    async def aclose(self) -> None:
        await self.hub.aclose()

    async def context(self, request: Request, page: str) -> dict[str, Any]:
        """What base.html needs: the nav, who is signed in, the CSRF token."""
        self.hub.ensure_started()
        return {
            "base": request.scope.get("root_path", "").rstrip("/"),
            "page": page,
            "nav": NAV,
            "prefix": self.queue.prefix,
            "version": package_version(),
            "csrf": csrf_token(request),
            "principal": await self.access.principal(request),
            "actions": self.access.actions,
            "uses_login": self.access.uses_login,
            "hub": self.hub,
            "now": dt.datetime.now(dt.UTC),
        }

    def fragment(self, name: str, **context: Any) -> str:
        return self.templates.get_template(name).render(**context)

    async def page(self, request: Request, name: str, page: str, *, status: int = 200,
                   **context: Any) -> HTMLResponse:
        ctx = await self.context(request, page)
        ctx.update(context)
        return HTMLResponse(self.fragment(name, **ctx), status_code=status)


def dashboard(request: Request) -> Dashboard:
    found: Dashboard = request.app.state.dashboard
    return found
