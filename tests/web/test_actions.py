"""Retry, cancel and drain from the browser; refused without sign-in or CSRF token."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import uuid
from typing import Any

import httpx
import pytest
import structlog
from playwright.async_api import expect

import venturi
from tests.web import tasks
from tests.web.conftest import TOKEN, confirm, serve, signed_in
from venturi import Outcome, Queue, Status
from venturi.web import TokenAuth, create_app, filters

pytestmark = pytest.mark.timeout(120)
CSRF = re.compile(r'"X-CSRF-Token": "([^"]+)"')


async def dead_jobs(queue: Queue, n: int) -> list[str]:
    ids = [str((await queue.enqueue(tasks.Doomed())).id) for _ in range(n)]
    await venturi.Worker(queue, tasks=[tasks.Doomed]).run(until_empty=True)
    return ids


async def status_of(queue: Queue, id: str) -> Status | None:
    job = await queue.job(id)
    return None if job is None else job.status


async def test_retry_selected_dead_jobs(web_queue: Queue, open_page: Any) -> None:
    ids = await dead_jobs(web_queue, 3)
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        await expect(page.locator(".principal")).to_have_text("token:alice")
        await page.goto(f"{served.url}/jobs?status=dead")
        for id in ids[:2]:
            await page.check(f"input[name=ids][value='{id}']")
        with structlog.testing.capture_logs() as logs:
            await page.click("#retry-selected")
            await confirm(
                page, "Retry 2 jobs?", "Retried 2 of 2 selected jobs (only dead jobs retry).")
        await page.click("#close-dialog")
        # The list refreshed itself: one dead job left on it.
        await expect(page.locator("#jobs-table tr[data-id]")).to_have_count(1)
        assert [await status_of(web_queue, i) for i in ids] == [
            Status.PENDING, Status.PENDING, Status.DEAD]
        assert (await web_queue.journal(ids[0]))[-1].outcome is Outcome.REDRIVEN

        await page.check("#select-all")
        await page.click("#cancel-selected")
        await confirm(page, "Cancel 1 job?", "Cancelled 1 of 1 selected jobs.")
        await page.click("#close-dialog")
        await expect(page.locator("#no-jobs")).to_be_visible()
        assert await status_of(web_queue, ids[2]) is None
        entry = next(e for e in logs if e["event"] == "dashboard_action")
        assert entry | {"principal": "token:alice", "action": "retry", "count": 2,
                        "scope": "selected", "selected": 2} == entry
        assert TOKEN not in repr(logs)
        assert w.errors == []


async def test_cancel_every_job_a_subject_filter_matches(web_queue: Queue,
                                                         open_page: Any) -> None:
    await web_queue.enqueue_many([tasks.Embed(uri=f"file:///gone/{i}") for i in range(7)])
    kept = await web_queue.enqueue(tasks.Embed(uri="file:///kept/1"))
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        await page.goto(f"{served.url}/jobs?subject=file:///gone")
        await expect(page.locator("#retry-all")).to_have_count(0)
        await page.click("#cancel-all")
        await confirm(
            page, "Cancel 7 jobs matching the filter?", "Cancelled 7 jobs matching the filter.")
    assert await web_queue.count(subject="file:///gone") == 0
    assert await status_of(web_queue, str(kept.id)) is Status.PENDING


async def test_a_confirmed_cancel_leaves_jobs_that_arrived_after_the_dialog(
        web_queue: Queue, open_page: Any) -> None:
    before = await web_queue.enqueue_many([tasks.Gated() for _ in range(5)])
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        await page.goto(f"{served.url}/jobs?kind=web.gated&status=pending")
        await page.click("#cancel-all")
        await expect(page.locator("#confirm-title")).to_have_text(
            "Cancel 5 jobs matching the filter?")
        late = await web_queue.enqueue(tasks.Gated())
        await page.click("#confirm")
        await expect(page.locator("#result-message")).to_have_text(
            "Cancelled 5 jobs matching the filter.")
    assert [await status_of(web_queue, str(i)) for i in before] == [None] * 5
    assert await status_of(web_queue, str(late.id)) is Status.PENDING


async def test_retry_every_dead_job_of_a_kind_from_the_job_page_and_the_filter(
        web_queue: Queue, open_page: Any) -> None:
    ids = await dead_jobs(web_queue, 4)
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        await page.goto(f"{served.url}/jobs/{ids[0]}")
        await page.click("#retry-job")
        await page.click("#confirm")
        await expect(page.locator("#result-message")).to_contain_text("Retried 1 of 1")
        await page.goto(f"{served.url}/jobs?kind=web.doomed&status=dead")
        await page.click("#retry-all")
        await confirm(
            page, "Retry 3 jobs matching the filter?", "Retried 3 jobs matching the filter.")
    assert {await status_of(web_queue, i) for i in ids} == {Status.PENDING}


async def _boundary(queue: Queue, older: list[str]) -> str:
    """A time bound between ``older`` and the jobs made next (ids carry milliseconds)."""
    await asyncio.sleep(0.005)
    stamp = filters.id_time(uuid.UUID(older[-1]))
    assert stamp is not None
    return filters.JobFilter(since=stamp + dt.timedelta(milliseconds=1)).params()["since"]


async def test_act_on_every_job_a_time_range_matches(web_queue: Queue, open_page: Any) -> None:
    """Created before a time: the newer jobs come first in every listing order, and are
    left alone."""
    old_dead = await dead_jobs(web_queue, 3)
    bound = await _boundary(web_queue, old_dead)
    new_dead = await dead_jobs(web_queue, 2)
    pending = [str(i) for i in await web_queue.enqueue_many([tasks.Gated() for _ in range(4)])]
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        await page.goto(f"{served.url}/jobs?status=dead&until={bound}")
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "3")
        await page.click("#retry-all")
        await confirm(
            page, "Retry 3 jobs matching the filter?", "Retried 3 jobs matching the filter.")
        assert [await status_of(web_queue, i) for i in old_dead + new_dead] == [
            Status.PENDING] * 3 + [Status.DEAD] * 2

        await page.goto(f"{served.url}/jobs?until={bound}")
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "3")
        await page.click("#cancel-all")
        await confirm(
            page, "Cancel 3 jobs matching the filter?", "Cancelled 3 jobs matching the filter.")

        await page.goto(f"{served.url}/jobs?since={bound}")
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "6")
    assert [await status_of(web_queue, i) for i in old_dead] == [None] * 3
    assert [await status_of(web_queue, i) for i in new_dead + pending] == [
        Status.DEAD] * 2 + [Status.PENDING] * 4


async def test_a_subject_narrowed_by_status_cancels_only_its_matches(
        web_queue: Queue, open_page: Any) -> None:
    await web_queue.enqueue_many([tasks.Embed(uri=f"file:///mixed/{i}") for i in range(3)])
    await venturi.Worker(web_queue, tasks=[tasks.Embed]).run(until_empty=True)
    waiting = await web_queue.enqueue_many([tasks.Embed(uri=f"file:///mixed/w{i}")
                                            for i in range(2)])
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        await page.goto(f"{served.url}/jobs?subject=file:///mixed&status=completed")
        await page.click("#cancel-all")
        await confirm(
            page, "Cancel 3 jobs matching the filter?", "Cancelled 3 jobs matching the filter.")
    assert await web_queue.count(subject="file:///mixed") == 2
    assert {await status_of(web_queue, str(i)) for i in waiting} == {Status.PENDING}


async def test_drain_a_worker_from_the_workers_page(web_queue: Queue, open_page: Any) -> None:
    worker = venturi.Worker(web_queue, tasks=[tasks.Embed], name="web-drain-me")
    runner = asyncio.create_task(worker.run())
    try:
        async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
            w = await signed_in(open_page, served)
            page = w.page
            await page.goto(f"{served.url}/workers")
            row = page.locator("tr[data-worker='web-drain-me']")
            with structlog.testing.capture_logs() as logs:
                await row.locator("button.drain").click()
                await confirm(
                    page, "Drain worker web-drain-me?", "Asked worker web-drain-me to drain.")
                await asyncio.wait_for(runner, 30)  # the worker really stopped
            assert worker.exit_code == 0
            assert any(e["event"] == "dashboard_action" and e["worker"] == "web-drain-me"
                       and e["principal"] == "token:alice" for e in logs)
    finally:
        if not runner.done():
            await worker.drain(grace=1)
            await asyncio.wait_for(runner, 20)


async def _csrf(http: httpx.AsyncClient, path: str = "/") -> str:
    found = CSRF.search((await http.get(path)).text)
    assert found is not None
    return found.group(1)


async def test_actions_are_refused_without_sign_in_or_csrf_token(web_queue: Queue) -> None:
    (dead,) = await dead_jobs(web_queue, 1)
    retry = {"action": "retry", "scope": "selected", "ids": dead}
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        async with served.client() as stranger:  # no session at all
            r = await stranger.post("/actions/run", data=retry)
            assert r.status_code == 403 and "CSRF" in r.text
        async with served.client() as viewer:  # a session and its token, not signed in
            csrf = await _csrf(viewer)
            r = await viewer.post("/actions/run", data={**retry, "csrf": csrf})
            assert r.status_code == 401 and "sign in" in r.text
            r = await viewer.post("/actions/confirm", data={**retry, "csrf": csrf})
            assert r.status_code == 401
            r = await viewer.post("/login", data={"token": TOKEN})  # no CSRF token
            assert r.status_code == 403
            r = await viewer.post("/login", data={"token": "wrong-token-xx", "csrf": csrf})
            assert r.status_code == 401
            assert await status_of(web_queue, dead) is Status.DEAD

            r = await viewer.post("/login", data={"token": TOKEN, "csrf": csrf})
            assert r.status_code == 303
            csrf = await _csrf(viewer)  # signing in starts a fresh session and token
            r = await viewer.post("/actions/run", data=retry)
            assert r.status_code == 403
            async with served.client() as other:
                r = await viewer.post("/actions/run",
                                      data={**retry, "csrf": await _csrf(other)})
                assert r.status_code == 403  # another session's token is not this one's
            assert await status_of(web_queue, dead) is Status.DEAD

            r = await viewer.post("/actions/run", headers={"X-CSRF-Token": csrf}, data=retry)
            assert r.status_code == 200 and "Retried 1 of 1" in r.text
        assert await status_of(web_queue, dead) is Status.PENDING


async def test_read_only_has_no_action_routes_and_no_buttons(web_queue: Queue,
                                                             open_page: Any) -> None:
    (dead,) = await dead_jobs(web_queue, 1)
    app = create_app(web_queue, auth=TokenAuth(TOKEN), read_only=True)
    async with serve(app) as served:
        async with served.client() as http:
            csrf = await _csrf(http)
            for path in ("/actions/run", "/actions/confirm", "/login", "/logout"):
                r = await http.post(path, data={"action": "retry", "scope": "selected",
                                                "ids": dead, "csrf": csrf, "token": TOKEN})
                assert r.status_code in (404, 405), path
        w = await open_page(f"{served.url}/jobs?status=dead")
        await expect(w.page.locator("#jobs-table tr[data-id]")).to_have_count(1)
        buttons = w.page.locator("input[name=ids], #retry-selected, #retry-all")
        await expect(buttons).to_have_count(0)
        await w.page.goto(f"{served.url}/jobs/{dead}")
        await expect(w.page.locator("#retry-job, #cancel-job")).to_have_count(0)
        await expect(w.page.locator(".who")).to_contain_text("view only")
    assert await status_of(web_queue, dead) is Status.DEAD


async def test_a_click_right_after_a_live_refresh_opens_the_dialog(
        web_queue: Queue, open_page: Any) -> None:
    """A live refresh replaces the "cancel all" form. htmx once wired the new form up only
    20 ms after the swap (its settle delay): a click in that window submitted the bare
    form, a GET of the page with the CSRF token in its URL, and no dialog. Here the click
    comes in the same task as the swap; the dialog must open and the URL stay clean."""
    await web_queue.enqueue_many([tasks.Embed(uri=f"file:///live/{i}") for i in range(2)])
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        url = f"{served.url}/jobs?subject=file:///live"
        await page.goto(url)
        await expect(page.locator("#live")).to_have_attribute("data-state", "connected")
        await page.evaluate("""() => {
            const matches = document.getElementById("matches");
            matches.addEventListener("htmx:sseMessage", () => {
                window.clickedAfterSwap = true;
                document.getElementById("cancel-all").click();
            }, {once: true});
        }""")
        await web_queue.enqueue(tasks.Embed(uri="file:///live/2"))  # a refresh of #matches
        await expect(page.locator("#confirm-title")).to_have_text(
            "Cancel 3 jobs matching the filter?")
        assert await page.evaluate("window.clickedAfterSwap") is True
        assert page.url.startswith(f"{served.url}/jobs?subject=") and "csrf" not in page.url
