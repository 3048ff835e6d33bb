"""``/healthz``, ``/readyz`` and ``/metrics`` on the web stack.

The same answers the worker's probes give (docs/operations/containers.md): a
liveness probe that stays green while a worker drains, a readiness probe that
names what is wrong, and the Prometheus text format of the registry given.
Both only read: they never touch the database.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route


class HealthLike(Protocol):
    """What a worker's ``health`` reports (``venturi.Worker.health`` is one)."""

    @property
    def alive(self) -> bool: ...

    @property
    def db_ok(self) -> bool: ...

    @property
    def listening(self) -> bool: ...

    @property
    def draining(self) -> bool: ...

    @property
    def ready(self) -> bool: ...


_ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _text(body: str, status: int = 200) -> Response:
    return PlainTextResponse(body, status_code=status)


def _read_only(request: Request) -> Response | None:
    if request.method not in ("GET", "HEAD"):
        return _text("method not allowed\n", 405)
    return None


def not_ready_reasons(health: HealthLike) -> list[str]:
    """Why ``/readyz`` is 503, in the order the worker's own server listed them."""
    return [name for name, bad in (
        ("database unreachable", not health.db_ok),
        ("listen inactive", not health.listening),
        ("draining", health.draining),
        ("not running", not health.alive)) if bad]


def probe_routes(health: HealthLike | None = None,
                 metrics: CollectorRegistry | None = None) -> list[BaseRoute]:
    """Routes for whichever of the probes were given something to report."""
    routes: list[BaseRoute] = []
    if health is not None:
        probe = health

        async def healthz(request: Request) -> Response:
            refused = _read_only(request)
            if refused is not None:
                return refused
            return _text("ok\n") if probe.alive else _text("not alive\n", 503)

        async def readyz(request: Request) -> Response:
            refused = _read_only(request)
            if refused is not None:
                return refused
            if probe.ready:
                return _text("ready\n")
            return _text("; ".join(not_ready_reasons(probe)) + "\n", 503)

        routes += [Route("/healthz", healthz, methods=_ANY_METHOD, name="healthz"),
                   Route("/readyz", readyz, methods=_ANY_METHOD, name="readyz")]
    if metrics is not None:
        registry = metrics

        async def scrape(request: Request) -> Response:
            refused = _read_only(request)
            if refused is not None:
                return refused
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

        routes.append(Route("/metrics", scrape, methods=_ANY_METHOD, name="metrics"))
    return routes
