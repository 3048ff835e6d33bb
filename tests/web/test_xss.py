"""Everything rendered from the database is text: markup in a kind, payload,
subject, carry, attachment, failure reason or worker name stays inert, whether
the page rendered it or a live update swapped it in."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest
from playwright.async_api import expect

import venturi
from tests.web import tasks
from tests.web.conftest import TOKEN, serve, sign_in
from venturi import Queue
from venturi.web import DashboardOptions, TokenAuth, create_app

pytestmark = pytest.mark.timeout(120)
XSS = tasks.XSS


async def inert(w: Any) -> None:
    """No script of the data ran and no element of it was created."""
    page = w.page
    assert w.dialogs == []
    await expect(page.locator("img[src=x]")).to_have_count(0)
    await expect(page.locator("script:not([src]):not([type='application/json'])")).to_have_count(0)


async def test_markup_from_the_database_shows_as_text(web_queue: Queue, open_page: Any) -> None:
    job = await web_queue.enqueue(tasks.Hostile())
    await venturi.Worker(web_queue, tasks=[tasks.Hostile]).run(until_empty=True)
    kind = tasks.Hostile.kind
    app = create_app(web_queue, auth=TokenAuth(TOKEN), options=DashboardOptions(refresh=0.3))
    async with serve(app) as served:
        w = await open_page(served.url + "/")
        page = w.page
        await sign_in(page, served.url)  # buttons and forms render too
        await expect(page.locator("#failures")).to_contain_text(XSS)  # the reason
        await expect(page.locator("table.kinds th[scope=row]")).to_have_text(kind)
        await inert(w)

        # Pushed live: a runnable job of the hostile kind reaches the counts and the
        # lag chart's series (JSON in an event, drawn by uPlot as text on a canvas).
        await web_queue.enqueue(tasks.Hostile())
        await expect(page.locator("tr[data-kind] [data-col=runnable]")).to_have_text("1")
        await inert(w)

        await page.goto(f"{served.url}/jobs?subject=file:///{XSS}")
        await expect(page.locator("#jobs-table td.subject").first).to_have_text(f"file:///{XSS}")
        await expect(page.locator("#filters input[name=subject]")).to_have_value(f"file:///{XSS}")
        await inert(w)

        await page.goto(f"{served.url}/jobs/{job.id}")
        await expect(page.locator("#job-payload")).to_contain_text('"html": "<script>')
        await expect(page.locator("#job-subject")).to_have_text(f"file:///{XSS}")
        await expect(page.locator("#job-carry")).to_contain_text("<img src=x onerror=alert(1)>")
        await expect(page.locator("#journal li.dead .note")).to_have_text(XSS)
        await expect(page.locator("#journal li.dead .attachment")).to_contain_text("<script>")
        await expect(page.locator("h1.job-title")).to_contain_text(kind)
        await inert(w)


async def test_a_hostile_worker_name_is_text(web_queue: Queue, open_page: Any) -> None:
    name = '<img src=x onerror=alert(5)>"><b>'
    worker = venturi.Worker(web_queue, tasks=[tasks.Embed], name=name,
                            heartbeat_interval=dt.timedelta(seconds=0.2))
    runner = asyncio.create_task(worker.run())
    try:
        app = create_app(web_queue, auth=TokenAuth(TOKEN))
        async with serve(app) as served:
            w = await open_page(served.url + "/")
            await sign_in(w.page, served.url)
            await w.page.goto(served.url + "/workers")
            await expect(w.page.locator("table.workers tbody th")).to_have_text(name)
            await w.page.locator("button.drain").click()  # the name travels in the dialog too
            await expect(w.page.locator("#confirm-title")).to_have_text(f"Drain worker {name}?")
            await inert(w)
    finally:
        await worker.drain(grace=1)
        await asyncio.wait_for(runner, 20)
