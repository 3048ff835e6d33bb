"""A workflow's page: steps, states, durations, the dependency graph in layers, and
cancelling the unfinished steps behind sign-in and CSRF."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.async_api import expect

import venturi
from tests.web import tasks
from tests.web.conftest import TOKEN, confirm, serve, signed_in
from venturi import Queue
from venturi.web import TokenAuth, create_app

pytestmark = pytest.mark.timeout(120)
CSRF = re.compile(r'"X-CSRF-Token": "([^"]+)"')


async def half_done(queue: Queue, name: str = "ingest") -> tuple[Any, dict[str, Any]]:
    """embed -> (summarize, gate) -> index: embed and summarize complete, gate waits for
    a worker that never comes, index waits for it."""
    wf = venturi.Workflow(name)
    embed = wf.add(tasks.Embed(uri="file:///wf/1"), name="embed")
    summarize = wf.add(tasks.Embed(uri="file:///wf/2"), after=[embed], name="summarize")
    gate = wf.add(tasks.Gated(), after=[embed], name="gate")
    index = wf.add(tasks.Embed(uri="file:///wf/3"), after=[summarize, gate], name="index")
    id = await queue.enqueue_workflow(wf)
    await venturi.Worker(queue, tasks=[tasks.Embed]).run(until_empty=True)
    return id, {"embed": embed.id, "summarize": summarize.id, "gate": gate.id,
                "index": index.id}


async def test_a_workflow_page_draws_its_steps_in_layers_and_cancels_them(
        web_queue: Queue, open_page: Any) -> None:
    id, steps = await half_done(web_queue)
    async with serve(create_app(web_queue, auth=TokenAuth(TOKEN))) as served:
        w = await signed_in(open_page, served)
        page = w.page
        await page.goto(f"{served.url}/workflows/{id}")
        graph = page.locator("#workflow-graph")
        layers = {name: await graph.locator(f"g[data-step={name}]").get_attribute("data-layer")
                  for name in steps}
        assert layers == {"embed": "0", "summarize": "1", "gate": "1", "index": "2"}
        await expect(graph.locator("line.edge")).to_have_count(4)
        await expect(graph.locator("line.edge.completed")).to_have_count(3)  # gate is not
        table = page.locator("#workflow-steps")
        states = {name: await table.locator(f"tr[data-step={name}] [data-col=state]").inner_text()
                  for name in steps}
        assert states == {"embed": "completed", "summarize": "completed", "gate": "pending",
                          "index": "waiting"}
        await expect(table.locator("tr[data-step=index] [data-col=after]")).to_have_text(
            "summarize, gate")
        await expect(table.locator("tr[data-step=embed] [data-col=duration]")).not_to_have_text("—")
        await expect(table.locator("tr[data-step=gate] [data-col=duration]")).to_have_text("—")

        # A step's node opens its job, and the job links back to its workflow.
        await graph.locator("g[data-step=embed] a").click()
        await page.wait_for_url(f"{served.url}/jobs/{steps['embed']}")
        await page.click("#job-workflow")
        await page.wait_for_url(f"{served.url}/workflows/{id}")
        await page.wait_for_load_state()

        await page.click("#cancel-workflow")
        await confirm(page, "Cancel the workflow's unfinished steps?",
                      "Cancelled 2 unfinished steps of the workflow.")
        assert w.errors == []
    state = await web_queue.workflow(id)
    assert state is not None and state.counts() == {"completed": 2, "gone": 2}


async def test_workflow_cancel_needs_sign_in_and_csrf_and_a_good_id(web_queue: Queue) -> None:
    id, _ = await half_done(web_queue)
    cancel = {"action": "cancel", "scope": "workflow", "workflow": str(id)}
    app = create_app(web_queue, auth=TokenAuth(TOKEN))
    async with serve(app) as served, served.client() as http:
        assert (await http.post("/actions/run", data=cancel)).status_code == 403
        found = CSRF.search((await http.get(f"/workflows/{id}")).text)
        assert found is not None
        csrf = found.group(1)
        assert (await http.post("/actions/run", data={**cancel, "csrf": csrf})
                ).status_code == 401
        assert "cancel-workflow" not in (await http.get(f"/workflows/{id}")).text
        assert (await http.post("/login", data={"token": TOKEN, "csrf": csrf})
                ).status_code == 303
        found = CSRF.search((await http.get(f"/workflows/{id}")).text)
        assert found is not None
        csrf = found.group(1)
        r = await http.post("/actions/run", data={**cancel, "workflow": "nope", "csrf": csrf})
        assert r.status_code == 400 and "not a workflow id" in r.text
        r = await http.post("/actions/run", data={**cancel, "action": "retry", "csrf": csrf})
        assert r.status_code == 400
        state = await web_queue.workflow(id)
        assert state is not None and state.counts() == {"completed": 2, "pending": 2}
        assert (await http.get("/workflows/not-an-id")).status_code == 404
        assert (await http.get(f"/workflows/{steps_unknown()}")).status_code == 404
        r = await http.post("/actions/run", data={**cancel, "csrf": csrf})
        assert r.status_code == 200 and "Cancelled 2" in r.text


def steps_unknown() -> str:
    return "01890000-0000-7000-8000-000000000000"


async def test_hostile_step_names_are_text(web_queue: Queue) -> None:
    wf = venturi.Workflow(tasks.XSS)
    first = wf.add(tasks.Embed(uri="file:///wf/x"), name=tasks.XSS)
    wf.add(tasks.Gated(), after=[first], name="<b>second</b>")
    id = await web_queue.enqueue_workflow(wf)
    async with serve(create_app(web_queue)) as served, served.client() as http:
        text = (await http.get(f"/workflows/{id}")).text
    assert tasks.XSS not in text and "<b>second" not in text
    assert "&lt;script&gt;" in text and "&lt;b&gt;second&lt;/b&gt;" in text


async def test_only_a_workflows_steps_link_to_it(web_queue: Queue) -> None:
    id, steps = await half_done(web_queue)
    alone = await web_queue.enqueue(tasks.Embed(uri="file:///alone"))
    after = await web_queue.enqueue(tasks.Embed(uri="file:///after"), after=[alone.id])
    assert await web_queue.workflow_of(steps["index"]) == id
    assert await web_queue.workflow_of(alone.id) is None  # in a graph, not a workflow's
    async with serve(create_app(web_queue)) as served, served.client() as http:
        page = (await http.get(f"/jobs/{steps['gate']}")).text
        assert f'href="/workflows/{id}"' in page
        assert 'id="job-workflow"' not in (await http.get(f"/jobs/{after.id}")).text
