"""The pages' event streams (``/events/...``): each sends the fragments its page
shows live, again whenever the hub's state moves on, and only those that changed.

The fragments are the same templates the page rendered, so what a stream
swaps in is escaped exactly like the page itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from venturi.errors import VenturiError

from .dashboard import Dashboard, dashboard
from .filters import FilterError, JobFilter
from .jobs import jobs_context
from .live import KEEPALIVE, sse
from .pages import (
    FAILURES_SHOWN,
    counts_context,
    job_state,
    parse_id,
    periodic_state,
    workers_state,
)

# A stream ends after this long and the browser reconnects at once (``retry``): a
# server that waits for open requests before it stops (uvicorn does, and a host
# application mounting the dashboard may not tell it to end its streams) waits
# at most this long for ours.
LIFETIME = 55.0
RECONNECT_MS = 500

Events = list[tuple[str, str]]
Render = Callable[[], Awaitable[Events]]


async def _summary(dash: Dashboard, ctx: dict[str, Any]) -> Events:
    return [("summary", dash.fragment("_summary.html", **ctx))]


def _overview(dash: Dashboard, ctx: dict[str, Any]) -> Render:
    async def render() -> Events:
        snap = await dash.hub.current()
        detail = await dash.hub.cached("detail", lambda: dash.queue.detail(FAILURES_SHOWN))
        series = orjson.dumps(dash.hub.samples.series()).decode()
        return [*await _summary(dash, ctx),
                ("counts", dash.fragment("_counts.html", **ctx, **counts_context(dash, snap))),
                ("failures", dash.fragment("_failures.html", **ctx, failed=detail.failed)),
                ("series", series)]
    return render


def _jobs(dash: Dashboard, ctx: dict[str, Any], f: JobFilter) -> Render:
    async def render() -> Events:
        snap = await dash.hub.current()
        more = await jobs_context(dash, f, snap)
        return [*await _summary(dash, ctx),
                ("matches", dash.fragment("_matches.html", **ctx, **more))]
    return render


def _workers(dash: Dashboard, ctx: dict[str, Any]) -> Render:
    async def render() -> Events:
        rows = await dash.hub.cached("workers", lambda: workers_state(dash))
        return [*await _summary(dash, ctx),
                ("workers", dash.fragment("_workers.html", **ctx, workers=rows))]
    return render


def _periodic(dash: Dashboard, ctx: dict[str, Any]) -> Render:
    async def render() -> Events:
        rows = await dash.hub.cached("periodic", lambda: periodic_state(dash))
        return [*await _summary(dash, ctx),
                ("periodic", dash.fragment("_periodic.html", **ctx, tasks=rows))]
    return render


def _job(dash: Dashboard, ctx: dict[str, Any], raw: str) -> Render:
    id = parse_id(raw)

    async def render() -> Events:
        job, journal = await dash.hub.cached(("job", id), lambda: job_state(dash, id))
        now_db = await dash.hub.cached("db_now", dash.queue.store.db_now)
        return [*await _summary(dash, ctx),
                ("job", dash.fragment("_job_live.html", **ctx, job=job, journal=journal,
                                      now_db=now_db))]
    return render


async def events(request: Request) -> Response:
    dash = dashboard(request)
    view = request.path_params["view"]
    ctx = await dash.context(request, view)
    render: Render
    if view == "overview":
        render = _overview(dash, ctx)
    elif view == "jobs":
        try:
            f = JobFilter.parse(request.query_params)
        except FilterError:
            f = JobFilter()
        render = _jobs(dash, ctx, f)
    elif view == "workers":
        render = _workers(dash, ctx)
    elif view == "periodic":
        render = _periodic(dash, ctx)
    else:
        return Response("no such stream\n", status_code=404, media_type="text/plain")
    return _stream(dash, render)


async def job_events(request: Request) -> Response:
    dash = dashboard(request)
    ctx = await dash.context(request, "jobs")
    return _stream(dash, _job(dash, ctx, request.path_params["id"]))


def _stream(dash: Dashboard, render: Render) -> StreamingResponse:
    hub = dash.hub

    async def body() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        ends = loop.time() + LIFETIME
        yield f"retry: {RECONNECT_MS}\n\n"
        async with hub.watch():
            sent: dict[str, str] = {}
            version = -1
            while not hub.closing and loop.time() < ends:
                if hub.version != version:
                    version = hub.version
                    try:
                        fresh = await render()
                    except VenturiError:  # the hub says so in the banner below
                        fresh = []
                    fresh.append(("db", dash.fragment("_db.html", db_error=hub.db_error)))
                    for event, data in fresh:
                        if sent.get(event) != data:
                            sent[event] = data
                            yield sse(event, data)
                elif not await hub.changed_since(version, min(KEEPALIVE, ends - loop.time())):
                    yield ": keepalive\n\n"

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def routes() -> list[BaseRoute]:
    return [Route("/events/job/{id}", job_events, name="job_events"),
            Route("/events/{view}", events, name="events")]
