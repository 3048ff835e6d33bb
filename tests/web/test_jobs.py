"""The jobs page: filters carried in the URL, keyset pages, in a real browser."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.async_api import expect

import venturi
from tests.web import tasks
from tests.web.conftest import serve
from venturi import Queue
from venturi.testing.builders import request
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
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "120")
        await expect(page.locator("#order")).to_contain_text("newest first")
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
        assert sorted(await listed(page)) == sorted(str(i) for i in dead)
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
        await expect(w.page.locator("#match-count")).to_have_attribute("data-total", "2")
        await w.page.goto(f"{served.url}/jobs?until={stamp}")
        assert await listed(w.page) == [str(i) for i in reversed(first)]
        await expect(w.page.locator("#match-count")).to_have_attribute("data-total", "3")
        # The form shows the bound it applied.
        await expect(w.page.locator("input[name=until]")).to_have_value(stamp)


async def test_a_large_time_range_is_counted_up_to_a_cap(
        web_queue: Queue, open_page: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filters, "COUNT_CAP", 11)
    await web_queue.enqueue_many([tasks.Embed() for _ in range(15)])
    since = filters.JobFilter(since=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).params()
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs?since={since['since']}")
        count = w.page.locator("#match-count")
        await expect(count).to_have_attribute("data-total", "10+")
        await expect(count).to_contain_text("More than 10 jobs")
        assert len(await listed(w.page)) == 15  # the list is not capped, only the count


async def test_a_subject_is_read_by_its_index_page_after_page(
        web_queue: Queue, open_page: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filters, "PAGE", 2)
    wanted = [(await web_queue.enqueue(tasks.Embed(uri=f"file:///deep/{i}"))).id
              for i in range(3)]
    # Newer jobs in the way, outside the subtree: no page reads past them by id.
    await web_queue.enqueue_many([tasks.Embed(uri=f"file:///noise/{i}") for i in range(250)])
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs?subject=file:///deep")
        page = w.page
        await expect(page.locator("#match-count")).to_have_attribute("data-total", "3")
        assert await listed(page) == [str(wanted[2]), str(wanted[1])]
        await page.locator("#older").click()
        await page.wait_for_load_state()
        assert await listed(page) == [str(wanted[0])]
        await expect(page.locator("#older")).to_have_count(0)


async def test_dead_jobs_are_listed_most_recently_dead_first(
        web_queue: Queue, open_page: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filters, "PAGE", 2)
    dead = []
    for _ in range(3):  # one at a time: each dies in its own settle, later than the last
        dead.append((await web_queue.enqueue(tasks.Doomed())).id)
        await venturi.Worker(web_queue, tasks=[tasks.Doomed]).run(until_empty=True)
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs?status=dead")
        page = w.page
        await expect(page.locator("#order")).to_contain_text("most recently dead first")
        assert await listed(page) == [str(dead[2]), str(dead[1])]
        await page.locator("#older").click()
        await page.wait_for_load_state()
        assert "%7C" in page.url or "|" in page.url  # a (finished_at, id) cursor
        assert await listed(page) == [str(dead[0])]
        # The oldest job dies again: first now, the order is the death's, not the id's.
        await web_queue.retry(ids=[dead[0]])
        redone = await web_queue.job(dead[0])
        assert redone is not None and redone.status is venturi.Status.PENDING
        await venturi.Worker(web_queue, tasks=[tasks.Doomed]).run(until_empty=True)
        await page.goto(f"{served.url}/jobs?status=dead")
        assert await listed(page) == [str(dead[0]), str(dead[2])]

        response = await page.goto(f"{served.url}/jobs?status=dead&before=nonsense")
        assert response is not None and response.status == 400
        await expect(page.locator("#filter-error")).to_contain_text("not a page cursor")


async def test_claimed_jobs_are_listed_by_lease_expiry(web_queue: Queue, open_page: Any) -> None:
    # The job created last expires last: newest-first would list it first.
    quick, slow = await web_queue.enqueue_many([tasks.Embed(), tasks.Gated()])
    store = web_queue.store
    await store.claim(request("web.gated", lease=dt.timedelta(minutes=10), by="w/1"))
    await store.claim(request("web.embed", lease=dt.timedelta(minutes=1), by="w/1"))
    async with serve(create_app(web_queue)) as served:
        w = await open_page(f"{served.url}/jobs?status=claimed")
        await expect(w.page.locator("#order")).to_contain_text("soonest lease expiry first")
        assert await listed(w.page) == [str(quick), str(slow)]
        await expect(w.page.locator("#jobs-table thead")).to_contain_text("Lease expires")
