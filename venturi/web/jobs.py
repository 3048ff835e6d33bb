"""The jobs page: a filter carried in the URL, keyset pages, selection for actions."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from venturi.errors import InvalidJobId
from venturi.store.records import Snapshot
from venturi.store.statuses import Status

from . import bulk, filters
from .dashboard import Dashboard, dashboard
from .filters import FilterError, JobFilter, Listing, list_jobs, match_count, order_of

ORDERS = {
    "newest": "newest first",
    "dead": "most recently dead first (the dead jobs' index)",
    "claimed": "soonest lease expiry first (the expiry index)",
}


def kinds_known(snap: Snapshot, f: JobFilter) -> list[str]:
    kinds = (set(snap.pending_by_kind) | set(snap.scheduled_by_kind)
             | set(snap.claimed_by_kind) | set(snap.dead_by_kind) | set(snap.completed_by_kind))
    if f.kind:
        kinds.add(f.kind)
    return sorted(kinds)


async def jobs_context(dash: Dashboard, f: JobFilter, snap: Snapshot) -> dict[str, Any]:
    """The filter's total and what acting on all of it would mean (live-updated too)."""
    total = await match_count(dash.queue, f, snap)
    plans = {action: bulk.plan(action, f, snap, total) for action in ("retry", "cancel")}
    return {"filter": f, "total": total, "plans": plans}


async def jobs_page(request: Request) -> Response:
    dash = dashboard(request)
    snap = await dash.hub.current()
    params = request.query_params
    error = None
    before = params.get("before", "").strip() or None
    try:
        f = JobFilter.parse(params)
    except FilterError as exc:
        f, before, error = JobFilter(), None, str(exc)
    listing = Listing([], None, order_of(f))
    if error is None:
        try:
            listing = await list_jobs(dash.queue, f, snap, cursor=before, limit=filters.PAGE)
        except InvalidJobId:
            before, error = None, "before: not a page cursor"
    context = await jobs_context(dash, f, snap)
    return await dash.page(
        request, "jobs.html", "jobs", status=400 if error else 200, error=error,
        raw={k: params.get(k, "") for k in ("kind", "status", "subject", "since", "until")},
        listing=listing, before=before, kinds=kinds_known(snap, f), order=ORDERS[listing.order],
        statuses=[s.value for s in Status], **context)


def routes() -> list[BaseRoute]:
    return [Route("/jobs", jobs_page, name="jobs")]
