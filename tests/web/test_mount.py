"""Mounted under a path prefix in a real Starlette application, with the host's
own sign-in as the auth hook: links, assets, live updates and actions all stay
under the prefix."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.async_api import expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route

import venturi
from tests.web import tasks
from tests.web.conftest import serve
from venturi import Queue, Status
from venturi.web import create_app

pytestmark = pytest.mark.timeout(120)
PREFIX = "/ops/queue"


def host_app(queue: Queue) -> tuple[Starlette, Starlette]:
    async def home(request: Request) -> Response:
        return PlainTextResponse("the host application")

    async def signin(request: Request) -> Response:
        # Stands in for the host's real login; the dashboard only sees the hook's answer.
        response = RedirectResponse(f"{PREFIX}/", status_code=303)
        response.set_cookie("host_user", "bob", httponly=True)
        return response

    def principal(request: Request) -> str | None:
        return request.cookies.get("host_user")

    dashboard = create_app(queue, auth=principal)
    app = Starlette(routes=[Route("/", home), Route("/signin", signin),
                            Mount(PREFIX, app=dashboard)])
    return app, dashboard


async def test_click_through_under_a_prefix(web_queue: Queue, open_page: Any) -> None:
    dead = await web_queue.enqueue(tasks.Doomed())
    await venturi.Worker(web_queue, tasks=[tasks.Doomed]).run(until_empty=True)
    await web_queue.enqueue(tasks.Embed(uri="file:///mounted/1"))
    app, dashboard = host_app(web_queue)
    try:
        async with serve(app) as served:
            root = served.url + PREFIX
            w = await open_page(root + "/")
            page = w.page
            await expect(page.locator("#live")).to_have_attribute("data-state", "connected")
            await expect(page.locator(".who")).to_contain_text("not authorised to act")
            # Styles and scripts came from the prefix (the charts need uPlot's script).
            await expect(page.locator("#chart-lag canvas")).to_have_count(1)
            assert await page.evaluate(
                "getComputedStyle(document.querySelector('header.top')).display") == "flex"

            await page.get_by_role("link", name="Jobs", exact=True).click()
            await expect(page).to_have_url(f"{root}/jobs")
            await page.select_option("select[name=status]", "dead")
            await page.click("#filters button[type=submit]")
            await expect(page).to_have_url(re.compile(re.escape(f"{root}/jobs?") + ".*dead"))
            await page.locator(f"a[href='{PREFIX}/jobs/{dead.id}']").click()
            await expect(page.locator("#job-status")).to_have_text("dead")
            await expect(page.locator("#retry-job")).to_have_count(0)  # the hook said no one

            await page.goto(served.url + "/signin")  # the host signs bob in
            await expect(page.locator(".principal")).to_have_text("bob")
            await page.goto(f"{root}/jobs/{dead.id}")
            await page.click("#retry-job")
            await page.click("#confirm")
            await expect(page.locator("#result-message")).to_contain_text("Retried 1 of 1")
            job = await web_queue.job(dead.id)
            assert job is not None and job.status is Status.PENDING
            await page.click("#close-dialog")

            for label in ("Workers", "Periodic", "Overview"):
                await page.get_by_role("link", name=label, exact=True).click()
                await expect(page).to_have_url(re.compile(re.escape(root) + "/"))
            r = await page.goto(served.url + "/")
            assert r is not None and await r.text() == "the host application"
            assert w.errors == []
    finally:
        await dashboard.state.dashboard.aclose()


async def test_handed_over_by_a_plain_asgi_dispatcher(web_queue: Queue) -> None:
    """What docs/operations/dashboard.md shows for a router that cannot mount."""
    dashboard = create_app(web_queue)

    async def fallback(scope: Any, receive: Any, send: Any) -> None:
        await PlainTextResponse("the host application")(scope, receive, send)

    async def application(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (scope["path"] + "/").startswith(PREFIX + "/"):
            scope = {**scope, "root_path": scope.get("root_path", "") + PREFIX}
            return await dashboard(scope, receive, send)
        return await fallback(scope, receive, send)

    await web_queue.enqueue(tasks.Embed(uri="file:///handed/1"))
    try:
        async with serve(application, lifespan="off") as served, served.client() as http:
            page = await http.get(f"{PREFIX}/jobs")
            assert page.status_code == 200 and "file:///handed/1" in page.text
            assert f'href="{PREFIX}/static/venturi.css"' in page.text
            assert (await http.get(f"{PREFIX}/static/venturi.css")).status_code == 200
            assert (await http.get("/")).text == "the host application"
    finally:
        await dashboard.state.dashboard.aclose()
