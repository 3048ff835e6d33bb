"""Screenshots of every page, at desktop and phone width, from a queue at work.

``VENTURI_SCREENSHOTS=1 pytest tests/web/test_screenshots.py`` rewrites the
images docs/operations/dashboard.md shows (docs/images/dashboard/); otherwise
they go to a temporary directory. Either way the test checks that no page is
wider than a 390 px phone screen.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

import venturi
from tests.conftest import wait_for
from tests.web import tasks
from tests.web.conftest import TOKEN, serve, sign_in
from venturi import Queue
from venturi.web import DashboardOptions, TokenAuth, create_app

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "images" / "dashboard"
PHONE = 390


async def busy_queue(queue: Queue, rounds: int, samples: Any) -> tuple[Any, asyncio.Task[None]]:
    """Work arriving and finishing for a few samples, a few dead jobs, a periodic
    task seeded, and a worker left holding gated jobs."""
    dead = [await queue.enqueue(tasks.Doomed(reason=r))
            for r in ("unsupported-format", "unsupported-format", "TimeoutError")]
    quick = venturi.Worker(queue, tasks=[tasks.Embed, tasks.Doomed, tasks.Resumable,
                                         tasks.Hourly], concurrency=8, name="embed-worker-1")
    runner = asyncio.create_task(quick.run())
    for n in range(rounds):
        await queue.enqueue_many([tasks.Embed(uri=f"s3://media/2026/{n}/{i}.pdf")
                                  for i in range(20 + 15 * n)])
        await queue.enqueue(tasks.Resumable())
        target = n + 2
        await wait_for(lambda t=target: len(samples) >= t, timeout=20, what="a chart sample")
    await quick.drain(grace=5)
    await asyncio.wait_for(runner, 20)
    gate = tasks.new_gate()
    held = venturi.Worker(queue, tasks=[tasks.Gated, tasks.Hourly], concurrency=4,
                          name="gpu-worker-2", heartbeat_interval=dt.timedelta(seconds=0.5))
    holder = asyncio.create_task(held.run())
    await queue.enqueue_many([tasks.Gated() for _ in range(6)])
    await queue.enqueue_many([tasks.Embed(uri=f"s3://media/backlog/{i}.pdf") for i in range(40)])
    await queue.enqueue(tasks.Embed(uri="s3://media/later.pdf"), delay=dt.timedelta(hours=2))
    gate.clear()
    return (held, gate, dead), holder


async def test_screenshots_of_every_page(web_queue: Queue, open_page: Any,
                                         tmp_path: Path) -> None:
    out = DOCS if os.environ.get("VENTURI_SCREENSHOTS") == "1" else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    app = create_app(web_queue, auth=TokenAuth(TOKEN),
                     options=DashboardOptions(refresh=0.5, sample_interval=1,
                                              tasks=[tasks.Hourly]))
    async with serve(app) as served:
        w = await open_page(served.url + "/")  # starts the sampler
        (held, gate, dead), holder = await busy_queue(web_queue, 8, app.state.dashboard.hub.samples)
        try:
            page = w.page
            await sign_in(page, served.url, name="ops")
            await expect(page.locator("[data-count=claimed]")).to_have_text("4")
            shots = {
                "overview": "/",
                "jobs": "/jobs?kind=web.embed",
                "job": f"/jobs/{dead[0].id}",
                "workers": "/workers",
                "periodic": "/periodic",
            }
            for name, path in shots.items():
                await page.goto(served.url + path)
                if name == "overview":
                    await expect(page.locator("#chart-throughput canvas")).to_have_count(1)
                await page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            # The kinds page with an operator's limit and a pause; a workflow half done
            # (its gate step waits for a slot of the worker holding the gated jobs).
            await web_queue.set_limits("web.embed", concurrency=4, rate="600/m")
            await web_queue.pause("web.resumable")
            await page.goto(served.url + "/kinds")
            await expect(page.get_by_text("web.resumable").first).to_be_visible()
            await page.screenshot(path=str(out / "kinds.png"), full_page=True)
            wf = venturi.Workflow("ingest s3://media/2026/report.pdf")
            embed = wf.add(tasks.Embed(uri="s3://media/2026/report.pdf"), name="embed")
            summarize = wf.add(tasks.Embed(uri="s3://media/2026/report.sum"), after=[embed],
                               name="summarize")
            review = wf.add(tasks.Gated(), after=[embed], name="review")
            wf.add(tasks.Embed(uri="s3://media/2026/report.idx"), after=[summarize, review],
                   name="index")
            flow = await web_queue.enqueue_workflow(wf)
            await web_queue.set_limits("web.embed", concurrency=None, rate=None)
            await venturi.Worker(web_queue, tasks=[tasks.Embed]).run(until_empty=True)
            await page.goto(served.url + f"/workflows/{flow}")
            await page.screenshot(path=str(out / "workflow.png"), full_page=True)

            phone = await open_page(served.url + "/", width=PHONE, height=844)
            await sign_in(phone.page, served.url, name="ops")
            for name in ("overview", "jobs", "job", "workers"):
                await phone.page.goto(served.url + shots[name])
                wide = await phone.page.evaluate("document.documentElement.scrollWidth")
                assert wide <= PHONE, f"{name} is {wide}px wide on a {PHONE}px screen"
                if name in ("overview", "jobs"):
                    await phone.page.screenshot(path=str(out / f"{name}-phone.png"))
            assert w.errors == [] and phone.errors == []
        finally:
            gate.set()
            await held.drain(grace=5)
            await asyncio.wait_for(holder, 20)
