"""Losing the database: the dashboard says so, keeps serving, and comes back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import expect

from tests.faults_cluster import PrivateCluster, private_pg, queue_on
from tests.web import tasks
from tests.web.conftest import serve
from venturi import Queue
from venturi.web import DashboardOptions, create_app

__all__ = ["private_pg"]
pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


@pytest.fixture
async def outage_queue(private_pg: PrivateCluster) -> AsyncIterator[Queue]:
    async with queue_on(private_pg, max_size=4) as queue:
        yield queue


async def test_a_banner_while_the_database_is_away(private_pg: PrivateCluster,
                                                   outage_queue: Queue, open_page: Any) -> None:
    await outage_queue.enqueue(tasks.Embed())
    app = create_app(outage_queue, options=DashboardOptions(refresh=0.3))
    async with serve(app) as served:
        w = await open_page(served.url + "/")
        page = w.page
        await expect(page.locator("[data-count=runnable]")).to_have_text("1")

        await asyncio.to_thread(private_pg.stop)
        banner = page.locator("#db .banner")
        await expect(banner).to_contain_text("database is unreachable", timeout=20_000)
        await expect(page.locator("[data-count=runnable]")).to_have_text("1")  # last known
        async with served.client() as http:
            r = await http.get("/jobs")
            assert r.status_code == 503 and "Traceback" not in r.text

        await asyncio.to_thread(private_pg.start)
        await expect(banner).to_have_count(0, timeout=30_000)
        # And the live counts move again.
        await outage_queue.enqueue(tasks.Embed())
        await expect(page.locator("[data-count=runnable]")).to_have_text("2", timeout=20_000)
        assert not [e for e in w.errors if "503" not in e]
