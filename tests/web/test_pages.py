"""Every page renders from real PostgreSQL data, in a real browser."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from typing import Any

import pytest
from playwright.async_api import expect

import venturi
from tests.conftest import wait_for
from tests.tracing.recording import Recorded
from tests.web import tasks
from tests.web.conftest import serve
from venturi import Queue, Status
from venturi.store.postgres import PostgresStore
from venturi.web import DashboardOptions, create_app

pytestmark = pytest.mark.timeout(90)


async def populate(queue: Queue) -> dict[str, Any]:
    """Completed, dead, paused-then-completed, runnable and scheduled jobs."""
    done = await queue.enqueue(tasks.Embed(uri="file:///bucket/a/1"))
    dead = await queue.enqueue(tasks.Doomed(reason="unsupported-format"))
    resumed = await queue.enqueue(tasks.Resumable())
    worker = venturi.Worker(queue, tasks=[tasks.Embed, tasks.Doomed, tasks.Resumable],
                            concurrency=2)
    await worker.run(until_empty=True)
    runnable = await queue.enqueue_many([tasks.Embed(uri=f"file:///bucket/b/{i}")
                                         for i in range(3)])
    later = await queue.enqueue(tasks.Embed(uri="file:///bucket/c/1"),
                                delay=dt.timedelta(hours=1))
    return {"done": done.id, "dead": dead.id, "resumed": resumed.id, "runnable": runnable,
            "later": later.id}


async def test_overview_shows_counts_per_kind_and_the_latest_dead(
        web_queue: Queue, open_page: Any) -> None:
    ids = await populate(web_queue)
    async with serve(create_app(web_queue)) as served:
        w = await open_page(served.url + "/")
        page = w.page
        embed = page.locator("tr[data-kind='web.embed']")
        await expect(embed.locator("[data-col=runnable]")).to_have_text("3")
        await expect(embed.locator("[data-col=scheduled]")).to_have_text("1")
        await expect(page.locator("tr[data-kind='web.doomed'] [data-col=dead]")).to_have_text("1")
        await expect(page.locator("[data-count=completed]")).to_have_text("2")
        await expect(embed.locator("[data-col=completed]")).to_have_text("1")
        await expect(page.locator("tr[data-kind='web.resumable'] [data-col=completed]")
                     ).to_have_text("1")
        await expect(page.locator("[data-count=dead]")).to_have_text("1")
        failures = page.locator("#failures")
        await expect(failures).to_contain_text("unsupported-format")
        await expect(failures.locator(f"a[href$='/jobs/{ids['dead']}']")).to_have_count(1)
        # Both charts drew (uPlot puts a canvas in each) from the kept samples.
        await expect(page.locator("#chart-throughput canvas")).to_have_count(1)
        await expect(page.locator("#chart-lag canvas")).to_have_count(1)
        await expect(page.locator("#live")).to_have_attribute("data-state", "connected")
        assert w.errors == []


async def test_the_throughput_chart_starts_with_the_hour_before_the_dashboard(
        web_queue: Queue, open_page: Any) -> None:
    """Jobs that finished before the dashboard started are on the chart at once, per
    minute, from their finished_at (samples.py)."""
    store = web_queue.store
    assert isinstance(store, PostgresStore)
    async with store.pool.acquire() as conn:
        await conn.execute(
            f"INSERT INTO {store.prefix}jobs (id, kind, payload, status, finished_at)"
            " SELECT gen_random_uuid(), 'web.embed', '{}', CASE WHEN g <= 6 THEN 'dead'"
            " ELSE 'completed' END, date_trunc('minute', now()) - interval '5 minutes'"
            " FROM generate_series(1, 126) AS g")
    async with serve(create_app(web_queue)) as served:
        w = await open_page(served.url + "/")
        series = json.loads(await w.page.locator("#series-data").text_content() or "{}")
        before = series["history"]  # the points before the samples
        minutes = list(zip(series["completed"][:before], series["dead"][:before], strict=True))
        assert (2.0, 0.1) in minutes  # 120 completed and 6 dead in one minute
        await expect(w.page.locator("#chart-throughput canvas")).to_have_count(1)
        assert w.errors == []


async def test_job_page_shows_payload_carry_and_the_journal_as_a_timeline(
        web_queue: Queue, open_page: Any) -> None:
    ids = await populate(web_queue)
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs/{ids['resumed']}")
        page = w.page
        await expect(page.locator("#job-status")).to_have_text("completed")
        await expect(page.locator("#job-carry")).to_contain_text('"page": 2')
        entries = page.locator("#journal li")
        await expect(entries).to_have_count(2)
        await expect(entries.nth(0).locator(".outcome")).to_have_text("paused")
        await expect(entries.nth(1).locator(".outcome")).to_have_text("completed")
        await expect(entries.nth(1).locator(".attachment")).to_contain_text('"resumed_from": 2')
        # The result as JSON, escaped like every field from the database.
        await expect(page.locator("#job-result")).to_contain_text('"pages": 2')
        await expect(page.locator("#job-result")).to_contain_text('"html": "<b>two</b>"')
        await expect(page.locator("#job-result b")).to_have_count(0)
        await expect(page.locator("#job-trace")).to_have_text("not traced")

        await page.goto(f"{served.url}/jobs/{ids['dead']}")
        await expect(page.locator("#job-status")).to_have_text("dead")
        await expect(page.locator("#job-result")).to_have_text("not completed yet")
        await expect(page.locator("#job-payload")).to_contain_text('"reason": "unsupported-format"')
        await expect(page.locator("#journal li .note")).to_have_text("unsupported-format")

        r = await page.goto(f"{served.url}/jobs/{ids['done']}x")
        assert r is not None and r.status == 404
        missing = "01900000-0000-7000-8000-000000000000"
        r = await page.goto(f"{served.url}/jobs/{missing}")
        assert r is not None and r.status == 404
        await expect(page.locator(".banner")).to_contain_text("does not exist")
        assert [e for e in w.errors if "404" not in e] == []


async def test_job_page_shows_the_trace_that_enqueued_it(
        web_queue: Queue, open_page: Any, spans: Recorded) -> None:
    job = await web_queue.enqueue(tasks.Embed(uri="file:///traced"))
    (send,) = spans.named("send web.embed")
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs/{job.id}")
        await expect(w.page.locator("#job-trace")).to_have_text(send["trace_id"])
        assert w.errors == []


async def test_workers_page_shows_a_running_worker_and_its_in_flight_jobs(
        web_queue: Queue, open_page: Any) -> None:
    gate = tasks.new_gate()
    worker = venturi.Worker(web_queue, tasks=[tasks.Gated], concurrency=3, name="web-test-w1",
                            heartbeat_interval=dt.timedelta(seconds=0.2))
    runner = asyncio.create_task(worker.run())
    try:
        await web_queue.enqueue_many([tasks.Gated(), tasks.Gated()])
        async with serve(create_app(web_queue, options=DashboardOptions(refresh=0.2))) as served:
            w = await open_page(served.url + "/workers")
            row = w.page.locator("tr[data-worker='web-test-w1']")
            await expect(row).to_contain_text("running")
            # Live: the heartbeat reports the two claimed jobs (no reload).
            await expect(row).to_contain_text("2 / 3")
            await expect(row).to_contain_text("web.gated")
    finally:
        gate.set()
        await worker.drain(grace=5)
        await asyncio.wait_for(runner, 20)


async def test_periodic_page_shows_the_next_run(web_queue: Queue, open_page: Any) -> None:
    worker = venturi.Worker(web_queue, tasks=[tasks.Hourly], concurrency=1)
    runner = asyncio.create_task(worker.run())
    try:
        async def seeded() -> bool:
            return await web_queue.count(kind="web.hourly", statuses=[Status.PENDING]) == 1
        await wait_for(seeded, what="the hourly occurrence seeded")
        page = await web_queue.history(kind="web.hourly", status="pending")
        (occurrence,) = page.jobs
        options = DashboardOptions(tasks=[tasks.Hourly, tasks.Embed])
        async with serve(create_app(web_queue, options=options)) as served:
            w = await open_page(served.url + "/periodic")
            row = w.page.locator("tr[data-kind='web.hourly']")
            await expect(row).to_contain_text("every 1 h 0 m")
            when = occurrence.visible_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            await expect(row.locator("td.next time")).to_have_text(when)
            await expect(row.locator(f"a[href$='/jobs/{occurrence.id}']")).to_have_count(1)
            await expect(w.page.locator("tr[data-kind='web.embed']")).to_have_count(0)
    finally:
        await worker.drain(grace=1)
        await asyncio.wait_for(runner, 20)


async def test_nav_reaches_every_page(web_queue: Queue, open_page: Any) -> None:
    await populate(web_queue)
    async with serve(create_app(web_queue)) as served:
        w = await open_page(served.url + "/")
        for label, path in (("Jobs", "/jobs"), ("Workers", "/workers"),
                            ("Periodic", "/periodic"), ("Overview", "/")):
            await w.page.get_by_role("link", name=label, exact=True).click()
            await expect(w.page).to_have_url(re.compile(re.escape(served.url + path) + "$"))
            await expect(w.page.locator("nav a[aria-current=page]")).to_have_text(label)
        assert w.errors == []
