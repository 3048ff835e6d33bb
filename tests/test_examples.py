"""The example tasks shipped as venturi.examples: each run() alone, then a demo batch
through a real worker on both stores."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import venturi
from venturi import Outcome, Queue, Status, examples
from venturi.examples import INDEX, Embed, Reindex, Summarize, Sweep


def ctx(kind: str, carry: Any = None, run_no: int = 1) -> venturi.Context:
    return venturi.Context(job_id=uuid.uuid4(), kind=kind, run_no=run_no, carry=carry, state=None)


@pytest.fixture(autouse=True)
def empty_index() -> Iterator[None]:
    INDEX.clear()
    yield
    INDEX.clear()


def test_document_and_vectors_are_deterministic() -> None:
    assert examples.document("file:///a.txt") == examples.document("file:///a.txt")
    assert examples.document("file:///a.txt") != examples.document("file:///b.txt")
    v = examples.vectorise(examples.document("file:///a.txt"))
    assert len(v) == examples.DIMS and abs(sum(x * x for x in v) - 1.0) < 1e-9


async def test_embed_stores_vectors_and_attaches_evidence() -> None:
    c = ctx("examples.embed")
    note = await Embed(uri="file:///docs/a.txt").run(c)
    entry = INDEX.get("file:///docs/a.txt")
    assert entry is not None and note == f"{len(entry.vectors)} chunks"
    assert c.attachment == {"chunks": len(entry.vectors), "dims": examples.DIMS,
                            "model": "hash-16"}
    assert Embed(uri="file:///docs/a.txt").subject() == "file:///docs/a.txt"


async def test_embed_gives_up_on_unsupported_formats() -> None:
    with pytest.raises(venturi.GiveUp) as raised:
        await Embed(uri="file:///docs/a.bin").run(ctx("examples.embed"))
    assert raised.value.reason == "unsupported-format"
    assert len(INDEX) == 0


async def test_summarize_respects_the_word_budget() -> None:
    c = ctx("examples.summarize")
    note = await Summarize(uri="file:///docs/a.md", words=20).run(c)
    assert c.attachment is not None and 0 < c.attachment["words"] <= 20
    assert note == f"{c.attachment['words']} words"


def test_summarize_merge_keeps_the_longest_request() -> None:
    pending = Summarize(uri="file:///a.md", words=30)
    assert isinstance(Summarize(uri="file:///a.md", words=10).merge(pending, None), venturi.Keep)
    decision = Summarize(uri="file:///a.md", words=50).merge(pending, {"x": 1})
    assert isinstance(decision, venturi.With)
    assert decision.payload == Summarize(uri="file:///a.md", words=50)
    assert decision.carry == {"x": 1}


async def test_summarize_requests_coalesce_on_enqueue() -> None:
    queue = Queue(venturi.MemoryStore())
    first = await queue.enqueue(Summarize(uri="file:///a.md", words=20))
    absorbed = await queue.enqueue(Summarize(uri="file:///a.md", words=10))
    raised = await queue.enqueue(Summarize(uri="file:///a.md", words=40))
    assert (absorbed.merged, raised.merged) == (True, True)
    assert absorbed.id == raised.id == first.id
    row = await queue.job(first.id)
    assert row is not None and row.payload["words"] == 40
    assert [e.outcome for e in await queue.journal(first.id)] == [Outcome.MERGED] * 2


async def test_reindex_pauses_with_its_position_until_done() -> None:
    task = Reindex(collection="file:///c/", documents=5, batch=2)
    carry: Any = None
    outcomes = []
    for run_no in range(1, 10):
        c = ctx("examples.reindex", carry=carry, run_no=run_no)
        result = await task.run(c)
        outcomes.append(result)
        if not isinstance(result, venturi.Pause):
            break
        assert result.has_carry and result.resume_in.total_seconds() == 0
        carry = result.carry
    assert [o.carry for o in outcomes if isinstance(o, venturi.Pause)] == [{"done": 2},
                                                                          {"done": 4}]
    assert outcomes[-1] == "reindexed 5 documents in 3 runs"
    assert len(INDEX) == 5 and INDEX.get("file:///c/4.txt") is not None


async def test_sweep_evicts_only_stale_vectors() -> None:
    await Embed(uri="file:///old.txt").run(ctx("examples.embed"))
    old = INDEX.get("file:///old.txt")
    assert old is not None
    INDEX.put("file:///old.txt", examples.Indexed(old.vectors, old.model, time.time() - 7200))
    await Embed(uri="file:///new.txt").run(ctx("examples.embed"))
    c = ctx("examples.sweep")
    assert await Sweep().run(c) == "evicted 1"
    assert c.attachment == {"evicted": 1, "kept": 1}
    assert Sweep.__task__.periodic and INDEX.get("file:///new.txt") is not None


def test_demo_batch_mixes_every_non_periodic_kind() -> None:
    batch = examples.demo_batch(40)
    assert len(batch) == 40
    assert {type(t) for t in batch} == {Embed, Summarize, Reindex}
    with pytest.raises(ValueError):
        examples.demo_batch(0)


@pytest.mark.timeout(60)
async def test_demo_batch_runs_to_completion_in_a_worker(queue: Queue) -> None:
    ids = await queue.enqueue_many(examples.demo_batch(24))
    unique = set(ids)
    assert len(unique) < len(ids), "the paired summaries merge"
    worker = venturi.Worker(queue, tasks=list(examples.TASKS), concurrency=4)
    await worker.run(until_empty=True)
    rows = [await queue.job(i) for i in unique]
    assert all(r is not None and r.status is Status.COMPLETED for r in rows)
    reindex = next(r for r in rows if r is not None and r.kind == "examples.reindex")
    assert reindex.run_count == 3 and reindex.failure_count == 0
