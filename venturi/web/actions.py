"""Retry, cancel, drain, pause, resume and limits: confirm first, then act, and log
who did it.

Both steps are POSTs that need a principal (401 without one) and the session's
CSRF token (403 without it). The confirmation names what will happen and to
how many jobs; the second POST repeats the request with ``confirmed`` and, for
a filter, the id bound ``upto`` the confirmation was computed under. These
routes exist only when actions are enabled (not ``read_only``, and an auth
scheme configured); otherwise they are 404.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from venturi.errors import ConfigError, VenturiError
from venturi.logs import get_logger
from venturi.store.flow import Rate, check_concurrency
from venturi.store.statuses import Status

from . import bulk
from . import format as fmt
from .auth import CSRF_FIELD, csrf_ok, csrf_token
from .dashboard import Dashboard, dashboard
from .filters import FilterError, JobFilter, match_count, uuid7_floor

log = get_logger("venturi.web")
MAX_SELECTED = 1_000
ACTIONS = ("retry", "cancel", "drain", "pause", "resume", "limits", "unlimit")
KIND_ACTIONS = ("pause", "resume", "limits", "unlimit")  # docs/concepts/flow-control.md
SCOPES = ("selected", "job", "filter", "worker", "kind", "workflow")


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class ActionRequest:
    """One action request, as the forms post it."""

    action: str
    scope: str  # selected | job | filter | worker | kind | workflow
    ids: list[uuid.UUID] = field(default_factory=list)
    filter: JobFilter = field(default_factory=JobFilter)
    worker: str | None = None
    upto: uuid.UUID | None = None
    kind: str | None = None
    concurrency: int | None = None  # "limits": the new ones, None leaving it as it is
    rate: Rate | None = None
    workflow: uuid.UUID | None = None

    @classmethod
    def parse(cls, form: FormData) -> ActionRequest:
        action, scope = str(form.get("action", "")), str(form.get("scope", ""))
        if action not in ACTIONS:
            raise Refused(400, f"unknown action {action[:40]!r}")
        if scope not in SCOPES:
            raise Refused(400, f"unknown scope {scope[:40]!r}")
        if (action == "drain") != (scope == "worker") \
                or (action in KIND_ACTIONS) != (scope == "kind") \
                or (scope == "workflow" and action != "cancel"):
            raise Refused(400, "drain applies to workers, pause, resume and limits to kinds, "
                               "retry and cancel to jobs, cancel to workflows")
        req = cls(action, scope)
        if scope == "kind":
            req._parse_kind(form)
        elif scope == "workflow":
            raw_id = form.get("workflow")
            try:
                req.workflow = uuid.UUID(raw_id if isinstance(raw_id, str) else "")
            except ValueError:
                raise Refused(400, "workflow is not a workflow id") from None
        elif scope in ("selected", "job"):
            raw = [v for v in form.getlist("ids") if isinstance(v, str)]
            if len(raw) > MAX_SELECTED:
                raise Refused(400, f"select at most {MAX_SELECTED} jobs at once")
            try:
                req.ids = list(dict.fromkeys(uuid.UUID(v) for v in raw))
            except ValueError:
                raise Refused(400, "a selected id is not a job id") from None
            if not req.ids:
                raise Refused(400, "select at least one job")
        elif scope == "filter":
            try:
                req.filter = JobFilter.parse(form)
            except FilterError as exc:
                raise Refused(400, str(exc)) from None
            upto = form.get("upto")
            if isinstance(upto, str) and upto:
                try:
                    req.upto = uuid.UUID(upto)
                except ValueError:
                    raise Refused(400, "upto is not an id") from None
        else:
            name = form.get("worker")
            req.worker = name.strip() if isinstance(name, str) and name.strip() else None
        return req

    def _parse_kind(self, form: FormData) -> None:
        kind = form.get("kind")
        self.kind = kind.strip() if isinstance(kind, str) and kind.strip() else None
        if self.kind is None:
            raise Refused(400, "name a kind")
        if self.action != "limits":
            return
        conc, rate = (str(form.get(k, "")).strip() for k in ("concurrency", "rate"))
        if not conc and not rate:
            raise Refused(400, "give a concurrency, a rate or both (clear limits to remove them)")
        try:
            self.concurrency = check_concurrency(int(conc)) if conc else None
        except (ValueError, ConfigError):
            raise Refused(400, f"concurrency {conc[:40]!r} is not a whole number "
                               "1..1000000") from None
        try:
            self.rate = Rate.parse(rate) if rate else None
        except ConfigError as exc:
            raise Refused(400, fmt.one_line(str(exc))) from None


async def _authorised(request: Request) -> tuple[Dashboard, FormData, str]:
    dash = dashboard(request)
    form = await request.form()
    if not csrf_ok(request, form.get(CSRF_FIELD)):
        raise Refused(403, "CSRF token missing or wrong: reload the page")
    who = await dash.access.principal(request)
    if who is None:
        raise Refused(401, "sign in to act on the queue")
    return dash, form, who


def _dialog(dash: Dashboard, request: Request, name: str, status: int = 200,
            **context: Any) -> HTMLResponse:
    context.setdefault("base", request.scope.get("root_path", "").rstrip("/"))
    return HTMLResponse(dash.fragment(name, **context), status_code=status)


def _refusal(dash: Dashboard, request: Request, exc: Refused) -> Response:
    return _dialog(dash, request, "_result.html", exc.status, ok=False, message=exc.message)


async def confirm(request: Request) -> Response:
    try:
        dash, form, _who = await _authorised(request)
        req = ActionRequest.parse(form)
        context: dict[str, Any] = {"req": req, "csrf": csrf_token(request)}
        if req.scope == "filter":
            snap = await dash.hub.current()
            total = await match_count(dash.queue, req.filter, snap)
            planned = bulk.plan(req.action, req.filter, snap, total)
            if isinstance(planned, bulk.Refusal):
                raise Refused(409, planned.reason)
            # Jobs created after this moment are not part of what is confirmed.
            context.update(plan=planned, upto=str(uuid7_floor(await dash.queue.store.db_now())))
        return _dialog(dash, request, "_confirm.html", **context)
    except Refused as exc:
        return _refusal(dashboard(request), request, exc)


async def run(request: Request) -> Response:
    try:
        dash, form, who = await _authorised(request)
        req = ActionRequest.parse(form)
        done, what = await _carry_out(dash, req)
    except Refused as exc:
        return _refusal(dashboard(request), request, exc)
    except (VenturiError, ValueError) as exc:
        return _refusal(dashboard(request), request, Refused(409, str(exc)))
    log.info("dashboard_action", principal=who, action=req.action, scope=req.scope,
             count=done, **_described(req))
    await dash.hub.refresh()
    response = _dialog(dash, request, "_result.html", ok=True, message=what)
    response.headers["HX-Trigger"] = "venturi-changed"
    return response


async def _carry_out(dash: Dashboard, req: ActionRequest) -> tuple[int, str]:
    queue = dash.queue
    if req.scope == "kind":
        return await _control_kind(dash, req)
    if req.scope == "workflow":
        assert req.workflow is not None
        n = await queue.cancel(workflow=req.workflow)
        return n, f"Cancelled {n} unfinished steps of the workflow."
    if req.action == "drain":
        await queue.drain(req.worker)
        target = f"worker {req.worker}" if req.worker else "every worker"
        return 1, f"Asked {target} to drain."
    if req.scope in ("selected", "job"):
        if req.action == "retry":
            n = await queue.retry(ids=req.ids)
            return n, f"Retried {n} of {len(req.ids)} selected jobs (only dead jobs retry)."
        n = await queue.cancel(ids=req.ids)
        return n, f"Cancelled {n} of {len(req.ids)} selected jobs."
    if req.upto is None:
        raise Refused(400, "confirm first: the action needs the confirmation's bound")
    snap = await dash.hub.current()
    total = await match_count(queue, req.filter, snap)
    planned = bulk.plan(req.action, req.filter, snap, total)
    if isinstance(planned, bulk.Refusal):
        raise Refused(409, planned.reason)
    n = await bulk.run(queue, planned, req.filter, snap, req.upto)
    verb = "Retried" if req.action == "retry" else "Cancelled"
    return n, f"{verb} {n} jobs matching the filter."


async def _control_kind(dash: Dashboard, req: ActionRequest) -> tuple[int, str]:
    queue, kind = dash.queue, req.kind
    assert kind is not None
    if req.action == "pause":
        await queue.pause(kind)
        return 1, f"Paused {kind}: no worker claims its jobs until it is resumed."
    if req.action == "resume":
        await queue.resume(kind)
        return 1, f"Resumed {kind}."
    if req.action == "unlimit":
        await queue.set_limits(kind, concurrency=None, rate=None)
        return 1, f"Cleared the operator's limits of {kind}: its code's apply."
    changes: dict[str, Any] = {}
    if req.concurrency is not None:
        changes["concurrency"] = req.concurrency
    if req.rate is not None:
        changes["rate"] = req.rate
    await queue.set_limits(kind, **changes)
    said = ", ".join(f"{k} {v}" for k, v in changes.items())
    return 1, f"Set {kind}: {said}."


def _described(req: ActionRequest) -> dict[str, Any]:
    """The log fields naming the target; never a payload."""
    if req.scope == "kind":
        return {"kind": req.kind, "concurrency": req.concurrency,
                "rate": None if req.rate is None else str(req.rate)}
    if req.scope == "workflow":
        return {"workflow": str(req.workflow)}
    if req.scope == "worker":
        return {"worker": req.worker or "*"}
    if req.scope in ("selected", "job"):
        ids: Sequence[uuid.UUID] = req.ids
        return {"job_id": str(ids[0])} if len(ids) == 1 else {"selected": len(ids)}
    f = req.filter
    return {"kind": f.kind, "status": f.status.value if isinstance(f.status, Status) else None,
            "subject": f.subject}


def routes() -> list[BaseRoute]:
    return [Route("/actions/confirm", confirm, methods=["POST"], name="action_confirm"),
            Route("/actions/run", run, methods=["POST"], name="action_run")]
