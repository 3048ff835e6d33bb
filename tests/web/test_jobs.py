"""The jobs page: filters carried in the URL, keyset pages, in a real browser."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.async_api import expect

import venturi
from tests.web import tasks
from tests.web.conftest import serve
from venturi import Queue
from venturi.web import create_app, filters

pytestmark = pytest.mark.timeout(120)


async def listed(page: Any) -> list[str]:
    ids: list[str] = await page.locator("#jobs-table tr[data-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.id)")
    return ids


async def test_pages_walk_every_job_once_newest_first(web_queue: Queue, open_page: Any) -> None:
    ids = await web_queue.enqueue_many([tasks.Embed(uri=f"file:///p/{i}") for i in range(120)])
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs?kind=web.embed")
        page = w.page
        await expect(page.locator(".matches")).to_contain_text("finished jobs per kind")
        seen: list[str] = []
        for expected in (50, 50, 20):
            rows = await listed(page)
            assert len(rows) == expected
            seen += rows
            older = page.locator("#older")
            if expected < 50:
                await expect(older).to_have_count(0)
                break
            await older.click()
            await page.wait_for_load_state()
            query = parse_qs(urlsplit(page.url).query)
            assert query["kind"] == ["web.embed"] and query["before"] == [seen[-1]]
        assert seen == [str(i) for i in reversed(ids)]
        await page.locator("#newest").click()
        assert (await listed(page))[0] == str(ids[-1])


async def test_filters_by_kind_status_and_subject_subtree(web_queue: Queue,
                                                          open_page: Any) -> None:
    a = await web_queue.enqueue_many([tasks.Embed(uri=f"file:///bucket/a/{i}")
                                      for i in range(12)])
    await web_queue.enqueue_many([tasks.Embed(uri=f"file:///bucket/b/{i}") for i in range(5)])
    dead = [(await web_queue.enqueue(tasks.Doomed())).id for _ in range(3)]
    await venturi.Worker(web_queue, tasks=[tasks.Doomed]).run(until_empty=True)
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs")
        page = w.page
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "20")

        await page.select_option("select[name=status]", "dead")
        await page.click("#filters button[type=submit]")
        await expect(page).to_have_url(re.compile(r"status=dead"))
        assert await listed(page) == [str(i) for i in reversed(dead)]
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "3")

        # A subtree, as cancel and count read it: a/1 and below, not a/10 or a/11.
        await page.goto(f"{served.url}/jobs")
        await page.fill("input[name=subject]", "file:///bucket/a/1")
        await page.click("#filters button[type=submit]")
        assert await listed(page) == [str(a[1])]
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "1")

        await page.fill("input[name=subject]", "file:///bucket/a/")
        await page.fill("input[name=kind]", "web.embed")
        await page.click("#filters button[type=submit]")
        assert await listed(page) == [str(i) for i in reversed(a)]
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "12")
        query = parse_qs(urlsplit(page.url).query)
        assert query["subject"] == ["file:///bucket/a/"] and query["kind"] == ["web.embed"]

        response = await page.goto(f"{served.url}/jobs?status=bogus")
        assert response is not None and response.status == 400
        await expect(page.locator("#filter-error")).to_contain_text("status: 'bogus'")


async def test_filters_by_creation_time(web_queue: Queue, open_page: Any) -> None:
    first = await web_queue.enqueue_many([tasks.Embed() for _ in range(3)])
    await asyncio.sleep(0.005)  # ids carry milliseconds: let the clock move past the batch
    second = await web_queue.enqueue_many([tasks.Embed() for _ in range(2)])
    last, boundary = filters.id_time(first[-1]), filters.id_time(second[0])
    assert last is not None and boundary is not None and last < boundary  # the precondition
    stamp = filters.JobFilter(since=boundary).params()["since"]
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs?since={stamp}")
        assert await listed(w.page) == [str(i) for i in reversed(second)]
        await expect(w.page.locator("#match-count")).to_have_attribute("data-total", "")
        await w.page.goto(f"{served.url}/jobs?until={stamp}")
        assert await listed(w.page) == [str(i) for i in reversed(first)]
        # The form shows the bound it applied.
        await expect(w.page.locator("input[name=until]")).to_have_value(stamp)


async def test_a_subject_search_reads_a_bounded_number_of_rows(
        web_queue: Queue, open_page: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filters, "SCAN_BUDGET", 100)
    monkeypatch.setattr(filters, "BATCH", 50)
    wanted = await web_queue.enqueue(tasks.Embed(uri="file:///deep/1"))
    await web_queue.enqueue_many([tasks.Embed(uri=f"file:///noise/{i}") for i in range(250)])
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs?subject=file:///deep")
        page = w.page
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "1")
        for _ in range(2):  # 250 newer rows in the way: two budgets of 100 find nothing
            await expect(page.locator("#no-jobs")).to_be_visible()
            await expect(page.locator("#examined")).to_contain_text("Examined 100 jobs")
            await page.locator("#older").click()
            await page.wait_for_load_state()
        assert await listed(page) == [str(wanted.id)]
        await expect(page.locator("#older")).to_have_count(0)
