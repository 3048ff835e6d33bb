"""Live counts: pushed over server-sent events while a real worker runs jobs."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest
from playwright.async_api import expect

import venturi
from tests.web import tasks
from tests.web.conftest import serve
from venturi import Queue
from venturi.web import DashboardOptions, create_app

pytestmark = pytest.mark.timeout(90)


async def test_new_work_arrives_by_notify(web_queue: Queue, open_page: Any) -> None:
    # No periodic refresh and no chart sample within the test: only a NOTIFY can
    # bring the new counts.
    app = create_app(web_queue, options=DashboardOptions(refresh=3600, sample_interval=600))
    async with serve(app) as served:
        w = await open_page(served.url + "/")
        await expect(w.page.locator("#live")).to_have_attribute("data-state", "connected")
        runnable = w.page.locator("[data-count=runnable]")
        await expect(runnable).to_have_text("0")
        await web_queue.enqueue_many([tasks.Embed() for _ in range(3)])
        await expect(runnable).to_have_text("3")
        await web_queue.enqueue(tasks.Embed(), delay=dt.timedelta(hours=1))
        await expect(w.page.locator("[data-count=scheduled]")).to_have_text("1")


async def test_counts_follow_a_worker_without_a_reload(web_queue: Queue, open_page: Any) -> None:
    gate = tasks.new_gate()
    app = create_app(web_queue, options=DashboardOptions(refresh=0.3))
    async with serve(app) as served:
        w = await open_page(served.url + "/")
        page = w.page
        await expect(page.locator("#live")).to_have_attribute("data-state", "connected")
        await page.evaluate("window.__sameDocument = true")
        cards = {name: page.locator(f"[data-count={name}]")
                 for name in ("runnable", "claimed", "completed")}

        # New work: the enqueue's NOTIFY wakes the dashboard.
        await web_queue.enqueue_many([tasks.Gated() for _ in range(4)])
        await expect(cards["runnable"]).to_have_text("4")

        worker = venturi.Worker(web_queue, tasks=[tasks.Gated], concurrency=4)
        runner = asyncio.create_task(worker.run())
        try:
            await expect(cards["claimed"]).to_have_text("4")
            await expect(cards["runnable"]).to_have_text("0")
            kind_row = page.locator("tr[data-kind='web.gated']")
            await expect(kind_row.locator("[data-col=claimed]")).to_have_text("4")

            gate.set()  # completions send no NOTIFY: the periodic refresh shows them
            await expect(cards["completed"]).to_have_text("4")
            await expect(cards["claimed"]).to_have_text("0")
            await expect(page.locator("#summary")).to_contain_text("0 running")
        finally:
            gate.set()
            await worker.drain(grace=5)
            await asyncio.wait_for(runner, 20)
        assert await page.evaluate("window.__sameDocument") is True
        assert w.errors == []


async def test_a_job_page_follows_its_job(web_queue: Queue, open_page: Any) -> None:
    gate = tasks.new_gate()
    job = await web_queue.enqueue(tasks.Gated())
    app = create_app(web_queue, options=DashboardOptions(refresh=0.3))
    async with serve(app) as served:
        w = await open_page(f"{served.url}/jobs/{job.id}")
        status = w.page.locator("#job-status")
        await expect(status).to_have_text("pending")
        worker = venturi.Worker(web_queue, tasks=[tasks.Gated], concurrency=1)
        runner = asyncio.create_task(worker.run())
        try:
            await expect(status).to_have_text("claimed")
            gate.set()
            await expect(status).to_have_text("completed")
            await expect(w.page.locator("#journal li .outcome")).to_have_text("completed")
        finally:
            gate.set()
            await worker.drain(grace=5)
            await asyncio.wait_for(runner, 20)
        await web_queue.cancel(ids=[job.id])
        await expect(w.page.locator("#job-gone")).to_be_visible()
