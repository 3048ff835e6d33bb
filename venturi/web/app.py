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

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from venturi.errors import VenturiError
from venturi.logs import get_logger
from venturi.queue import Queue

from . import actions, jobs, pages, streams, workflows
from . import format as fmt
from .auth import Access, AuthHook, TokenAuth
from .dashboard import Dashboard, DashboardOptions, dashboard
from .probes import HealthLike, probe_routes

log = get_logger("venturi.web")

_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


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
    opts = options or DashboardOptions()
    access = Access(auth, read_only=read_only)
    dash = Dashboard(queue, access, opts)
    routes: list[BaseRoute] = [
        *probe_routes(health, metrics),
        *pages.routes(),
        *jobs.routes(),
        *workflows.routes(),
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
