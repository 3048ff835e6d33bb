"""``create_app``: the dashboard as an ASGI application (Starlette).

Mount it anywhere: every link it renders starts at the request's
``root_path``, so ``Mount("/ops/queue", app=create_app(queue))`` inside a
Starlette or FastAPI application just works. Background work (the LISTEN
connection, the stats refresh) starts with the first request, on the
server's event loop, because a mounted application gets no lifespan events;
``await app.state.dashboard.aclose()`` stops it (its own lifespan does that
when the app is served on its own).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import jinja2
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import venturi
from venturi import Queue, Task, VenturiError
from venturi.logs import get_logger
from venturi.task import registered

from . import format as fmt
from .auth import Access, AuthHook, TokenAuth, csrf_token
from .live import Hub
from .probes import HealthLike, probe_routes

log = get_logger("venturi.web")

# The pages, in nav order: (endpoint name, label). Kinds (pause, limits) and
# workflows join this list when the queue grows them.
NAV: tuple[tuple[str, str], ...] = (
    ("overview", "Overview"),
    ("jobs", "Jobs"),
    ("workers", "Workers"),
    ("periodic", "Periodic"),
)

_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


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
            "version": venturi.__version__,
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


class SecurityHeaders:
    """Headers that keep a rendered payload inert even if escaping ever slipped:
    no inline script runs, nothing frames the page, nothing sniffs types."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", _CSP.encode()),
                            (b"x-content-type-options", b"nosniff"),
                            (b"x-frame-options", b"DENY"),
                            (b"referrer-policy", b"same-origin")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(
    queue: Queue,
    *,
    auth: TokenAuth | AuthHook | None = None,
    read_only: bool = False,
    health: HealthLike | None = None,
    metrics: CollectorRegistry | None = None,
    options: DashboardOptions | None = None,
) -> Starlette:
    """The dashboard of ``queue`` as an ASGI application.

    ``auth``: a :class:`TokenAuth` (operators sign in with the token) or a hook
    ``(request) -> principal | None`` from the host application; without
    either, or with ``read_only``, the dashboard only shows. ``health`` and
    ``metrics`` (a worker's ``health`` and its Prometheus registry) add
    ``/healthz``, ``/readyz`` and ``/metrics``.
    """
    from . import actions, jobs, pages, streams

    opts = options or DashboardOptions()
    access = Access(auth, read_only=read_only)
    dash = Dashboard(queue, access, opts)
    routes: list[BaseRoute] = [
        *probe_routes(health, metrics),
        *pages.routes(),
        *jobs.routes(),
        *streams.routes(),
        Mount("/static", app=StaticFiles(packages=[("venturi.web", "static")]), name="static"),
    ]
    if access.uses_login:
        routes += pages.login_routes()
    if access.actions:
        routes += actions.routes()

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await dash.aclose()

    secret = opts.session_secret or access.session_key()
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(SessionMiddleware, secret_key=secret,
                       session_cookie=f"venturi_web_{queue.prefix.rstrip('_')}",
                       same_site="lax", https_only=opts.secure_cookie, max_age=12 * 3600),
        ],
        exception_handlers={VenturiError: _unavailable, 404: _not_found},
        lifespan=lifespan,
    )
    app.state.dashboard = dash
    return app


def create_probe_app(*, health: HealthLike | None = None,
                     metrics: CollectorRegistry | None = None) -> Starlette:
    """Only ``/healthz``, ``/readyz`` and ``/metrics``: a worker's ``--http`` without
    the dashboard. Any other path is 404 ``not found``."""
    return Starlette(routes=probe_routes(health, metrics),
                     exception_handlers={404: _plain_not_found})


async def _plain_not_found(request: Request, exc: Exception) -> Response:
    return PlainTextResponse("not found\n", status_code=404)


async def _not_found(request: Request, exc: Exception) -> Response:
    dash = dashboard(request)
    detail = getattr(exc, "detail", None) or "no such page"
    return await dash.page(request, "error.html", "", status=404, title="Not found",
                           message=str(detail))


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("dashboard_request_failed", path=request.url.path, error=type(exc).__name__)
    dash = dashboard(request)
    return await dash.page(request, "error.html", "", status=503, title="Unavailable",
                           message=fmt.one_line(str(exc) or type(exc).__name__))
