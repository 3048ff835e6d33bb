"""The kinds page: paused or not, limits and where they come from, what holds a kind
back; pause, resume, set and clear limits behind sign-in, CSRF and confirmation."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx
import pytest
import structlog
from playwright.async_api import expect

import venturi
from tests.web import tasks
from tests.web.conftest import TOKEN, confirm, serve, sign_in, signed_in
from venturi import Queue
from venturi.web import TokenAuth, create_app

pytestmark = pytest.mark.timeout(120)
CSRF = re.compile(r'"X-CSRF-Token": "([^"]+)"')


async def declared(queue: Queue) -> None:
    """A worker declares its kinds' code limits as it starts."""
    await venturi.Worker(queue, tasks=[tasks.Limited, tasks.Embed]).run(until_empty=True)


async def state(queue: Queue, kind: str) -> Any:
    return next(k for k in await queue.kinds() if k.kind == kind)


async def test_pause_limit_clear_and_resume_from_the_kinds_page(web_queue: Queue,
                                                                open_page: Any) -> None:
    await declared(web_queue)
    await web_queue.enqueue(tasks.Limited())
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        await page.click("nav >> text=Kinds")
        await page.wait_for_url(f"{served.url}/kinds")
        await page.wait_for_load_state()  # htmx has taken the forms over
        row = page.locator("tr[data-kind='web.limited']")
        await expect(row.locator("[data-col=concurrency]")).to_have_text("2 (code)")
        await expect(row.locator("[data-col=rate]")).to_have_text("100/m (code)")
        await expect(row.locator("[data-col=held]")).to_have_text("no")
        await expect(row.locator("[data-col=pending]")).to_have_text("1")

        with structlog.testing.capture_logs() as logs:
            await row.locator("button.pause").click()
            await confirm(page, "Pause web.limited?", "Paused web.limited", partial=True)
        await page.click("#close-dialog")
        await expect(row.locator("[data-col=state]")).to_have_text("paused")  # refreshed itself
        await expect(row.locator("[data-col=held]")).to_have_text("paused by an operator")
        assert (await state(web_queue, "web.limited")).paused
        entry = next(e for e in logs if e["event"] == "dashboard_action")
        assert entry | {"principal": "token:alice", "action": "pause", "scope": "kind",
                        "kind": "web.limited"} == entry

        await row.locator("input[name=concurrency]").fill("5")
        await row.locator("input[name=rate]").fill("abc")
        await row.locator("button.set-limits").click()
        await expect(page.locator("#result-message")).to_have_text(
            "rate 'abc' is not N/s, N/m or N/h (e.g. 50/s)")
        await page.click("#close-dialog")
        await row.locator("input[name=rate]").fill("10/s")
        await row.locator("button.set-limits").click()
        await confirm(
            page, "Set the limits of web.limited?", "Set web.limited: concurrency 5, rate 10/s.")
        await page.click("#close-dialog")
        await expect(row.locator("[data-col=concurrency]")).to_have_text("5 (operator; code 2)")
        await expect(row.locator("[data-col=rate]")).to_have_text("10/s (operator; code 100/m)")

        await row.locator("button.unlimit").click()
        await page.click("#confirm")
        await expect(page.locator("#result-message")).to_contain_text("Cleared")
        await page.click("#close-dialog")
        await expect(row.locator("[data-col=concurrency]")).to_have_text("2 (code)")
        await row.locator("button.resume").click()
        await page.click("#confirm")
        await page.click("#close-dialog")
        await expect(row.locator("[data-col=state]")).to_have_text("active")
        assert w.errors == [f"400 {served.url}/actions/confirm"]  # the rate "abc"
    k = await state(web_queue, "web.limited")
    assert not k.paused and not k.operator.any


async def _csrf(http: httpx.AsyncClient) -> str:
    found = CSRF.search((await http.get("/kinds")).text)
    assert found is not None
    return found.group(1)


async def test_kind_actions_need_sign_in_csrf_and_good_input(web_queue: Queue) -> None:
    await declared(web_queue)
    pause = {"action": "pause", "scope": "kind", "kind": "web.limited"}
    app = create_app(web_queue, auth=TokenAuth(TOKEN))
    async with serve(app) as served, served.client() as http:
        assert (await http.post("/actions/run", data=pause)).status_code == 403
        csrf = await _csrf(http)
        r = await http.post("/actions/run", data={**pause, "csrf": csrf})
        assert r.status_code == 401
        assert (await http.post("/login", data={"token": TOKEN, "csrf": csrf})
                ).status_code == 303
        csrf = await _csrf(http)
        bad = [({"action": "limits", "rate": "abc"}, "rate 'abc' is not N/s"),
               ({"action": "limits", "concurrency": "0"}, "concurrency '0' is not"),
               ({"action": "limits", "concurrency": "x<b>"}, "concurrency 'x<b>' is not"),
               ({"action": "limits"}, "give a concurrency, a rate or both"),
               ({"action": "drain"}, "drain applies to workers"),
               ({"kind": " "}, "name a kind")]
        for change, said in bad:
            r = await http.post("/actions/confirm", data={**pause, **change, "csrf": csrf})
            message = re.search(r'id="result-message">([^<]*)</p>', r.text)
            assert r.status_code == 400 and message is not None, (change, r.text)
            assert said in html.unescape(message.group(1)) and "\n" not in message.group(1)
            assert "<b>" not in r.text
        assert not (await state(web_queue, "web.limited")).paused
        r = await http.post("/actions/run", data={**pause, "csrf": csrf})
        assert r.status_code == 200 and "Paused web.limited" in r.text
    assert (await state(web_queue, "web.limited")).paused


async def test_a_hostile_kind_is_text_on_the_kinds_page(web_queue: Queue,
                                                        open_page: Any) -> None:
    await web_queue.pause(tasks.HOSTILE_KIND)
    await web_queue.set_limits(tasks.HOSTILE_KIND, rate="3/s")
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        async with served.client() as http:
            text = (await http.get("/kinds")).text
            assert tasks.HOSTILE_KIND not in text and "&lt;script&gt;" in text
        w = await open_page(served.url + "/")
        await sign_in(w.page, served.url)
        await w.page.goto(served.url + "/kinds")
        row = w.page.locator("table.kinds tbody tr")
        await expect(row.locator("th")).to_have_text(tasks.HOSTILE_KIND)
        await row.locator("button.resume").click()  # the kind travels in the dialog too
        await expect(w.page.locator("#confirm-title")).to_have_text(
            f"Resume {tasks.HOSTILE_KIND}?")
        await w.page.click("#confirm")
        await expect(w.page.locator("#result-message")).to_have_text(
            f"Resumed {tasks.HOSTILE_KIND}.")
        assert w.dialogs == []
        await expect(w.page.locator("img[src=x]")).to_have_count(0)
    assert not (await state(web_queue, tasks.HOSTILE_KIND)).paused


async def test_read_only_kinds_page_has_no_buttons(web_queue: Queue) -> None:
    await declared(web_queue)
    app = create_app(web_queue, auth=TokenAuth(TOKEN), read_only=True)
    async with serve(app) as served, served.client() as http:
        text = (await http.get("/kinds")).text
        assert "web.limited" in text and "actions/confirm" not in text
