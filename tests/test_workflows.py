"""Dependencies and workflows end to end on PostgreSQL: workers running a DAG, each step
reading its dependencies' results; what ``after=`` refuses; the CLI's view
(docs/concepts/workflows.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import venturi
from benchmarks.harness import drop_prefix
from venturi import Dependent, InvalidJob, Queue, Status, Workflow

pytestmark = pytest.mark.timeout(90)
SEEN: list[tuple[str, dict[str, Any]]] = []


class Embed(venturi.Task, kind="test.flows.embed"):
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        ctx.set_result({"vector": len(self.uri)})


class Summarize(venturi.Task, kind="test.flows.summarize"):
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        parents = await ctx.results()
        SEEN.append(("summarize", {str(k): v for k, v in parents.items()}))
        ctx.set_result(f"summary of {self.uri}")


class Index(venturi.Task, kind="test.flows.index"):
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        parents = await ctx.results()
        SEEN.append(("index", {str(k): v for k, v in parents.items()}))


TASKS = [Embed, Summarize, Index]


@pytest.fixture
async def pg_queue(pg_dsn: str, prefix: str) -> AsyncIterator[Queue]:
    async with Queue.connect(pg_dsn, prefix=prefix) as queue:
        await queue.migrate()
        try:
            yield queue
        finally:
            await drop_prefix(pg_dsn, prefix)


async def test_workers_run_a_workflow_in_order_with_the_parents_results(
        pg_queue: Queue) -> None:
    SEEN.clear()
    wf = Workflow("document")
    embed = wf.add(Embed(uri="file:///a"), name="embed")
    summary = wf.add(Summarize(uri="file:///a"), after=[embed], name="summarize")
    wf.add(Index(uri="file:///a"), after=[embed, summary], name="index")
    wf_id = await pg_queue.enqueue_workflow(wf)
    await venturi.Worker(pg_queue, tasks=TASKS, concurrency=5).run(until_empty=True)
    assert [
        ("summarize", {str(embed.id): {"vector": 9}}),
        ("index", {str(embed.id): {"vector": 9}, str(summary.id): "summary of file:///a"}),
    ] == SEEN
    state = await pg_queue.workflow(wf_id)
    assert state is not None and state.counts() == {"completed": 3}


async def test_after_in_enqueue_and_enqueue_many(pg_queue: Queue) -> None:
    first = await pg_queue.enqueue(Embed(uri="file:///b"))
    second = await pg_queue.enqueue(Summarize(uri="file:///b"), after=[first.id])
    ids = await pg_queue.enqueue_many([
        Embed(uri="file:///c"), Dependent(Index(uri="file:///b"), after=[str(second.id)])])
    waiting = await pg_queue.job(ids[1])
    assert waiting is not None and (waiting.status, waiting.waiting) == (Status.PENDING, 1)
    await venturi.Worker(pg_queue, tasks=TASKS, concurrency=5).run(until_empty=True)
    for id in (first.id, second.id, *ids):
        job = await pg_queue.job(id)
        assert job is not None and job.status is Status.COMPLETED


async def test_what_after_refuses(pg_queue: Queue) -> None:
    first = await pg_queue.enqueue(Embed(uri="file:///d"))
    with pytest.raises(InvalidJob, match="delay"):
        await pg_queue.enqueue(Index(uri="x"), after=[first.id], delay=dt.timedelta(seconds=1))
    with pytest.raises(InvalidJob, match="after_failure"):
        await pg_queue.enqueue(Index(uri="x"), after=[first.id], after_failure="maybe")
    with pytest.raises(InvalidJob, match="list"):
        await pg_queue.enqueue(Index(uri="x"), after=str(first.id))  # type: ignore[arg-type]
    with pytest.raises(venturi.InvalidJobId):
        await pg_queue.enqueue(Index(uri="x"), after=["not-a-uuid"])
    job, _ = pg_queue._jobs.new_job(Index(uri="x"))
    with pytest.raises(InvalidJob, match="itself"):
        await pg_queue.store.enqueue([dataclasses.replace(job, after=(job.id,))])
    other, _ = pg_queue._jobs.new_job(Index(uri="y"))
    with pytest.raises(InvalidJob, match="cycle"):
        await pg_queue.store.enqueue([dataclasses.replace(job, after=(other.id,)),
                                      dataclasses.replace(other, after=(job.id,))])
    assert await pg_queue.count() == 1


def test_venturi_workflow_shows_every_step(pg_dsn: str, prefix: str) -> None:
    async def build() -> str:
        async with Queue.connect(pg_dsn, prefix=prefix) as queue:
            await queue.migrate()
            wf = Workflow("cli")
            a = wf.add(Embed(uri="file:///e"), name="embed")
            wf.add(Index(uri="file:///e"), after=[a], name="index")
            return str(await queue.enqueue_workflow(wf))

    try:
        wf_id = asyncio.run(build())
        env = {**os.environ, "VENTURI_DSN": pg_dsn, "VENTURI_PREFIX": prefix}
        script = Path(sys.executable).with_name("venturi")
        doc = json.loads(subprocess.run([str(script), "workflow", wf_id, "--json"], env=env,
                                        capture_output=True, text=True, check=True).stdout)
        assert doc["name"] == "cli" and doc["counts"] == {"pending": 2}
        assert [s["name"] for s in doc["steps"]] == ["embed", "index"]
        assert doc["steps"][1]["after"] == [doc["steps"][0]["id"]]
        assert doc["steps"][1]["waiting"] == 1
        text = subprocess.run([str(script), "workflow", wf_id], env=env, capture_output=True,
                              text=True, check=True).stdout
        assert "index" in text and "embed" in text and "pending" in text
        gone = subprocess.run([str(script), "workflow", "01900000-0000-7000-8000-000000000000"],
                              env=env, capture_output=True, text=True)
        assert gone.returncode != 0 and "unknown workflow" in gone.stderr
    finally:
        asyncio.run(drop_prefix(pg_dsn, prefix))
