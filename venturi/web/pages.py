"""The overview, one job, the kinds, a workflow, the workers and the periodic tasks;
signing in and out."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from venturi.logs import get_logger
from venturi.store.records import JobRecord, JournalRecord, Snapshot, WorkerInfo

from .auth import CSRF_FIELD, csrf_ok
from .dashboard import Dashboard, dashboard

log = get_logger("venturi.web")

FAILURES_SHOWN = 10
SILENT_AFTER = dt.timedelta(seconds=30)  # six missed heartbeats at the default 5 s


@dataclass(frozen=True, slots=True)
class KindRow:
    kind: str
    runnable: int
    scheduled: int
    claimed: int
    dead: int
    lag: dt.timedelta | None
    completed: int = 0


def kind_rows(snap: Snapshot) -> list[KindRow]:
    kinds = sorted(set(snap.pending_by_kind) | set(snap.scheduled_by_kind)
                   | set(snap.claimed_by_kind) | set(snap.dead_by_kind)
                   | set(snap.completed_by_kind))
    return [KindRow(k, snap.pending_by_kind.get(k, 0), snap.scheduled_by_kind.get(k, 0),
                    snap.claimed_by_kind.get(k, 0), snap.dead_by_kind.get(k, 0),
                    snap.oldest_pending_age.get(k), snap.completed_by_kind.get(k, 0))
            for k in kinds]


def counts_context(dash: Dashboard, snap: Snapshot) -> dict[str, Any]:
    return {"rows": kind_rows(snap), "totals": snap.counts_by_status,
            "scheduled": sum(snap.scheduled_by_kind.values()),
            "runnable": sum(snap.pending_by_kind.values())}


async def overview(request: Request) -> Response:
    dash = dashboard(request)
    snap = await dash.hub.current()
    detail = await dash.queue.detail(limit=FAILURES_SHOWN)
    return await dash.page(request, "overview.html", "overview", **counts_context(dash, snap),
                           failed=detail.failed, series=dash.hub.samples.series())


# --- one job ------------------------------------------------------------------------


def parse_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise HTTPException(404, f"{raw[:80]!r} is not a job id") from None


async def job_state(dash: Dashboard, id: uuid.UUID) -> tuple[JobRecord | None,
                                                            list[JournalRecord]]:
    job = await dash.queue.job(id)
    journal = await dash.queue.journal(id) if job is not None else []
    return job, journal


async def job_page(request: Request) -> Response:
    dash = dashboard(request)
    id = parse_id(request.path_params["id"])
    job, journal = await job_state(dash, id)
    if job is None:
        raise HTTPException(404, f"job {id} does not exist (any more): finished jobs are "
                                 "deleted by retention or cleanup, cancelled ones at once")
    return await dash.page(request, "job.html", "jobs", job=job, journal=journal,
                           now_db=await dash.queue.store.db_now(),
                           workflow=await dash.queue.workflow_of(id))


# --- workers --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerRow:
    info: WorkerInfo
    state: str  # running, draining, silent
    heartbeat_age: dt.timedelta


def worker_rows(workers: list[WorkerInfo], now: dt.datetime) -> list[WorkerRow]:
    rows = []
    for w in workers:
        age = max(now - w.last_seen, dt.timedelta(0))
        state = "silent" if age > SILENT_AFTER else ("draining" if w.draining else "running")
        rows.append(WorkerRow(w, state, age))
    return rows


async def workers_state(dash: Dashboard) -> list[WorkerRow]:
    return worker_rows(await dash.queue.workers(), await dash.queue.store.db_now())


async def workers_page(request: Request) -> Response:
    dash = dashboard(request)
    return await dash.page(request, "workers.html", "workers", workers=await workers_state(dash))


# --- periodic tasks ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeriodicRow:
    kind: str
    schedule: str
    occurrence: JobRecord | None  # the pending or claimed occurrence, if any


async def periodic_state(dash: Dashboard) -> list[PeriodicRow]:
    """Each periodic task and its live occurrence: one read of the unique periodic
    index, which holds exactly the pending or claimed occurrences (at most one per kind)."""
    live = {j.kind: j for j in await dash.queue.periodic_jobs()}
    rows = []
    for task in dash.periodic_tasks():
        opts = task.__task__
        schedule = f"cron {opts.cron}" if opts.cron else f"every {_every(opts.every)}"
        rows.append(PeriodicRow(opts.kind, schedule, live.get(opts.kind)))
    return rows


def _every(every: dt.timedelta | None) -> str:
    from .format import duration

    return duration(every)


# --- kinds: paused, limits, what holds them back (docs/concepts/flow-control.md) ----------

HELD = {"paused": "paused by an operator", "concurrency": "at its concurrency limit",
        "rate": "at its rate limit for this window"}


async def kinds_page(request: Request) -> Response:
    dash = dashboard(request)
    return await dash.page(request, "kinds.html", "kinds", kinds=await dash.queue.kinds(),
                           held=HELD)


async def periodic_page(request: Request) -> Response:
    dash = dashboard(request)
    return await dash.page(request, "periodic.html", "periodic",
                           tasks=await periodic_state(dash), known=bool(dash.periodic_tasks()))


# --- signing in -----------------------------------------------------------------------


async def login(request: Request) -> Response:
    dash = dashboard(request)
    base = request.scope.get("root_path", "").rstrip("/")
    if request.method == "GET":
        return await dash.page(request, "login.html", "login", error=None)
    form = await request.form()
    if not csrf_ok(request, form.get(CSRF_FIELD)):
        return await dash.page(request, "login.html", "login", status=403,
                               error="The form expired: reload the page and sign in again.")
    token, name = form.get("token"), form.get("name")
    who = dash.access.sign_in(request, token if isinstance(token, str) else "",
                              name if isinstance(name, str) else "")
    client = request.client.host if request.client else None
    if who is None:
        log.warning("dashboard_sign_in_refused", client=client)
        return await dash.page(request, "login.html", "login", status=401,
                               error="That is not the dashboard's token.")
    log.info("dashboard_signed_in", principal=who, client=client)
    return RedirectResponse(f"{base}/", status_code=303)


async def logout(request: Request) -> Response:
    dash = dashboard(request)
    base = request.scope.get("root_path", "").rstrip("/")
    form = await request.form()
    if not csrf_ok(request, form.get(CSRF_FIELD)):
        raise HTTPException(403, "CSRF token missing or wrong")
    log.info("dashboard_signed_out", principal=await dash.access.principal(request))
    dash.access.sign_out(request)
    return RedirectResponse(f"{base}/", status_code=303)


def routes() -> list[BaseRoute]:
    return [
        Route("/", overview, name="overview"),
        Route("/jobs/{id}", job_page, name="job"),
        Route("/kinds", kinds_page, name="kinds"),
        Route("/workers", workers_page, name="workers"),
        Route("/periodic", periodic_page, name="periodic"),
    ]


def login_routes() -> list[BaseRoute]:
    return [Route("/login", login, methods=["GET", "POST"], name="login"),
            Route("/logout", logout, methods=["POST"], name="logout")]
