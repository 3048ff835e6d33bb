"""Enqueue through the Queue handle: dedup and merge (docs/concepts/dedup.md) and
atomic batches."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pytest

import venturi
from venturi import Enqueued, InvalidJob, ManualClock, Outcome, Priority, Queue, Status
from venturi._ids import uuid7
from venturi.store.base import (
    Action,
    CountFilter,
    MergeUpdate,
    NewJobBatch,
    Store,
)
from venturi.testing.builders import add, claim_one, new_job, settlement
from venturi.testing.tasks import Embed, Refresh, Summarize, Tick, Urgent

S = dt.timedelta(seconds=1)


async def _row(queue: Queue, id: Any) -> Any:
    row = await queue.job(id)
    assert row is not None
    return row


async def test_enqueue_stores_the_task(queue: Queue, clock: ManualClock) -> None:
    res = await queue.enqueue(Summarize(uri="file:///s", words=7), delay=5 * S)
    assert res == Enqueued(res.id, False)
    row = await _row(queue, res.id)
    assert (row.kind, row.payload, row.priority, row.status, row.subject, row.dedup_key,
            row.max_failures, row.run_count, row.failure_count, row.carry, row.periodic) == (
        "conformance.summarize", {"uri": "file:///s", "words": 7}, 2, Status.PENDING, "file:///s",
        None, 25, 0, 0, None, False)
    assert (row.created_at, row.visible_at) == (clock.now(), clock.now() + 5 * S)
    at = clock.now() + dt.timedelta(hours=1)
    row = await _row(queue, (await queue.enqueue(Embed(uri="x"), at=at, priority="high")).id)
    assert (row.visible_at, row.priority, row.max_failures) == (at, 0, 3)


async def test_keep_absorbs_the_new_enqueue(queue: Queue) -> None:
    first = await queue.enqueue(Refresh(uri="u", version=1))
    again = await queue.enqueue(Refresh(uri="u", version=2), priority=Priority.HIGH)
    assert again == Enqueued(first.id, True)
    row = await _row(queue, first.id)
    assert (row.payload["version"], row.priority) == (1, Priority.NORMAL)
    assert [(e.outcome, e.run_no) for e in await queue.journal(first.id)] == [
        (Outcome.MERGED, 0)]
    assert await queue.count(kind="conformance.refresh") == 1
    other = await queue.enqueue(Refresh(uri="v", version=1))  # another key: its own job
    assert not other.merged and other.id != first.id


async def test_replace_takes_payload_and_priority_and_resets_carry(
    queue: Queue, store: Store
) -> None:
    first = await queue.enqueue(Refresh(uri="u", version=1))
    claimed = await claim_one(store, "conformance.refresh")
    assert await store.settle("w/1", settlement(claimed, Action.FAIL, set_carry=True,
                                               carry='{"cursor": 9}'))
    res = await queue.enqueue(Refresh(uri="u", policy="replace", version=5), priority="high")
    assert res == Enqueued(first.id, True)
    row = await _row(queue, first.id)
    assert (row.payload, row.priority, row.carry, row.run_count, row.failure_count) == (
        {"uri": "u", "policy": "replace", "version": 5}, 0, None, 1, 1)
    assert [e.outcome for e in await queue.journal(first.id)] == [
        Outcome.RETRIED, Outcome.MERGED]


async def test_with_writes_payload_and_carry_as_given(queue: Queue) -> None:
    first = await queue.enqueue(Refresh(uri="u", version=1))
    res = await queue.enqueue(Refresh(uri="u", policy="with", version=2))
    assert res == Enqueued(first.id, True)
    row = await _row(queue, first.id)
    assert (row.payload, row.carry) == ({"uri": "u", "policy": "with", "version": 3},
                                        {"merged_from": 1})


async def test_merge_moves_visible_at_earlier_never_later(
    queue: Queue, clock: ManualClock
) -> None:
    first = await queue.enqueue(Refresh(uri="u"), delay=60 * S)
    await queue.enqueue(Refresh(uri="u"), delay=10 * S)
    assert (await _row(queue, first.id)).visible_at == clock.now() + 10 * S
    await queue.enqueue(Refresh(uri="u"), delay=120 * S)
    assert (await _row(queue, first.id)).visible_at == clock.now() + 10 * S
    await queue.enqueue(Refresh(uri="u"), at=clock.now() - 5 * S)
    assert (await _row(queue, first.id)).visible_at == clock.now() - 5 * S
    assert len(await queue.journal(first.id)) == 3


async def test_a_claimed_job_is_not_a_merge_candidate(queue: Queue, store: Store) -> None:
    first = await queue.enqueue(Refresh(uri="u"))
    await claim_one(store, "conformance.refresh")
    second = await queue.enqueue(Refresh(uri="u"))
    assert not second.merged and second.id != first.id
    assert await queue.journal(first.id) == []
    third = await queue.enqueue(Refresh(uri="u"))
    assert third == Enqueued(second.id, True)


async def test_enqueue_many_merges_items_sharing_a_key_in_input_order(queue: Queue) -> None:
    ids = await queue.enqueue_many([
        Refresh(uri="u", version=1),
        Embed(uri="e"),
        Refresh(uri="u", policy="replace", version=2),
        Refresh(uri="u", policy="with", version=10),
        Refresh(uri="w", version=7),
    ])
    assert ids[0] == ids[2] == ids[3]
    assert len(set(ids)) == 3
    row = await _row(queue, ids[0])
    assert (row.payload["version"], row.payload["policy"], row.carry) == (
        12, "with", {"merged_from": 2})
    assert [e.outcome for e in await queue.journal(ids[0])] == [Outcome.MERGED] * 2
    assert await queue.count() == 3


async def test_enqueue_many_returns_ids_in_input_order(queue: Queue) -> None:
    tasks = [Embed(uri=f"file:///{n}") for n in range(5)] + [Urgent(n=1)]
    ids = await queue.enqueue_many(tasks)
    for id, task in zip(ids, tasks, strict=True):
        row = await _row(queue, id)
        assert (row.kind, row.payload) == (task.kind, orjson.loads(task.to_json()))
        assert type(task).from_payload(row.payload) == task
    assert await queue.enqueue_many([]) == []


BAD_ITEMS: list[tuple[str, Any, str]] = [
    ("nul", Embed(uri="file:///a\x00b"), "NUL"),
    ("surrogate", Embed(uri="file:///\ud800"), "JSON"),
    ("unknown-field", ("conformance.embed", {"uri": "x", "bogus": 1}), "bogus"),
    ("unknown-kind", ("conformance.no-such-kind", {}), "conformance.no-such-kind"),
    ("not-a-task", object(), "Task"),
]


@pytest.mark.parametrize(("name", "bad", "says"), BAD_ITEMS, ids=[b[0] for b in BAD_ITEMS])
async def test_enqueue_many_rejects_the_whole_batch_naming_the_index(
    queue: Queue, name: str, bad: Any, says: str
) -> None:
    with pytest.raises(InvalidJob) as info:
        await queue.enqueue_many([Embed(uri="ok"), Refresh(uri="r"), bad, Embed(uri="ok2")])
    assert info.value.index == 2
    assert str(info.value).startswith("job 2: ") and says in str(info.value)
    assert "\n" not in str(info.value)
    assert await queue.count() == 0


async def test_store_enqueue_rejects_a_bad_batch_atomically(store: Store) -> None:
    for bad in (new_job(priority=3), new_job(priority=-1), new_job(payload={"a": "\x00"}),
                new_job(subject="a\x00b"), new_job(max_failures=0)):
        with pytest.raises(InvalidJob) as info:
            await add(store, new_job(), new_job(dedup_key="d"), bad, new_job())
        assert info.value.index == 2, bad
        assert await store.count(CountFilter()) == 0


async def test_priority_out_of_range_is_invalid_job(queue: Queue) -> None:
    for priority in (3, -1, "7", "urgent"):
        with pytest.raises(InvalidJob, match="priority"):
            await queue.enqueue(Embed(uri="x"), priority=priority)
    assert await queue.count() == 0


async def test_bad_schedule_options_are_invalid_job(queue: Queue, clock: ManualClock) -> None:
    with pytest.raises(InvalidJob, match="not both"):
        await queue.enqueue(Embed(uri="x"), delay=S, at=clock.now())
    with pytest.raises(InvalidJob, match="delay"):
        await queue.enqueue(Embed(uri="x"), delay=-S)
    with pytest.raises(InvalidJob, match="timezone"):
        await queue.enqueue(Embed(uri="x"), at=dt.datetime(2030, 1, 1))
    assert await queue.count() == 0


async def test_dedup_candidate_and_merge_into(store: Store, clock: ManualClock) -> None:
    old, other, unkeyed = await add(store, new_job(dedup_key="d", payload={"v": 1}),
                                    new_job("other", dedup_key="d"), new_job())
    candidate = await store.dedup_candidate("k", "d")
    assert candidate is not None and candidate.id == old.id
    assert await store.dedup_candidate("k", "nope") is None
    assert (await store.dedup_candidate("other", "d")).id == other.id  # type: ignore[union-attr]

    assert await store.merge_into(old.id, MergeUpdate(payload='{"v": 3}', priority=0),
                                  visible_at=clock.now() - S, note="manual")
    row = await store.job(old.id)
    assert row is not None and (row.payload, row.priority, row.visible_at) == (
        {"v": 3}, 0, clock.now() - S)
    assert [(e.outcome, e.note) for e in await store.journal(old.id)] == [
        (Outcome.MERGED, "manual")]
    assert (await claim_one(store, "k")).id == old.id  # priority 0 now
    assert not await store.merge_into(old.id, MergeUpdate(payload='{"v": 4}'))
    assert len(await store.journal(old.id)) == 1
    assert await store.dedup_candidate("k", "d") is None
    assert await store.journal(unkeyed.id) == []


class Sloppy(venturi.Task, kind="conformance.sloppy-merge"):
    """Returns a With(...) of another task type: a bug the queue must refuse."""

    uri: str

    def dedup_key(self) -> str | None:
        return self.uri

    def merge(self, pending: Sloppy, carry: Any) -> venturi.Merge:
        return venturi.With(Embed(uri=self.uri))

    async def run(self, ctx: venturi.Context) -> None:
        return None


async def test_a_merge_returning_another_task_type_is_refused(queue: Queue) -> None:
    first = await queue.enqueue(Sloppy(uri="u"))
    with pytest.raises(InvalidJob, match="same kind"):
        await queue.enqueue(Sloppy(uri="u"))
    with pytest.raises(InvalidJob):
        await queue.enqueue_many([Embed(uri="x"), Sloppy(uri="u")])
    assert await queue.count() == 1 and await queue.journal(first.id) == []


async def test_a_pending_job_that_no_longer_decodes_is_not_merged(
    queue: Queue, store: Store
) -> None:
    (stale,) = await add(store, new_job("conformance.refresh", dedup_key="u", payload={"gone": 1}))
    res = await queue.enqueue(Refresh(uri="u"))
    assert not res.merged and res.id != stale.id
    assert await store.journal(stale.id) == []


async def test_oversized_payload_is_invalid_job(store: Store) -> None:
    small = Queue(store, max_payload_bytes=100)
    with pytest.raises(InvalidJob, match="100-byte limit"):
        await small.enqueue(Embed(uri="x" * 200))
    with pytest.raises(InvalidJob) as info:
        await small.enqueue_many([Embed(uri="ok"), Embed(uri="é" * 60)])
    assert info.value.index == 1
    assert await small.count() == 0


async def test_enqueue_batch_stores_what_enqueue_would(store: Store, clock: ManualClock) -> None:
    batch = NewJobBatch(
        ids=[uuid7() for _ in range(3)], kinds=["a", "b", "a"],
        payloads=['{"n": 1}', '{"n": 2}', "{}"], priorities=[0, 1, 2], max_failures=[1, 5, 25],
        subjects=[None, "file:///s", None], periodic=[False, False, True],
    )
    await store.enqueue_batch(batch)
    for i, job in enumerate(batch.jobs()):
        row = await store.job(batch.ids[i])
        assert row is not None
        assert (row.kind, row.payload, row.priority, row.max_failures, row.subject,
                row.periodic, row.status, row.visible_at, row.dedup_key, row.carry) == (
            job.kind, orjson.loads(job.payload), job.priority, job.max_failures, job.subject,
            job.periodic, Status.PENDING, clock.now(), None, None)
    # Optional columns left out: no subject, not periodic.
    plain = NewJobBatch(ids=[uuid7()], kinds=["c"], payloads=["{}"], priorities=[1],
                        max_failures=[25])
    await store.enqueue_batch(plain)
    row = await store.job(plain.ids[0])
    assert row is not None and (row.subject, row.periodic) == (None, False)


@pytest.mark.parametrize("column", ["priorities", "max_failures", "payloads", "kinds", "subjects"])
async def test_enqueue_batch_rejects_a_bad_row_naming_it(store: Store, column: str) -> None:
    bad = {"priorities": 3, "max_failures": 0, "payloads": '{"a": "\\u0000"}',
           "kinds": "k\x00", "subjects": "s\ud800"}[column]
    columns: dict[str, Any] = {
        "priorities": [1, 1, 1], "max_failures": [25, 25, 25], "payloads": ["{}"] * 3,
        "kinds": ["k"] * 3, "subjects": [None, "s", None],
    }
    columns[column][1] = bad
    batch = NewJobBatch(ids=[uuid7() for _ in range(3)], **columns)
    with pytest.raises(InvalidJob) as info:
        await store.enqueue_batch(batch)
    assert info.value.index == 1
    assert await store.count(CountFilter()) == 0


async def test_enqueue_many_bulk_path_keeps_subjects_periodic_and_options(queue: Queue) -> None:
    tasks: list[Any] = [Urgent(n=1), Embed(uri="file:///e/"), Tick(), Summarize(uri="file:///s")]
    ids = await queue.enqueue_many(tasks)
    rows = [await _row(queue, id) for id in ids]
    assert [(r.kind, r.priority, r.max_failures, r.subject, r.periodic) for r in rows] == [
        ("conformance.urgent", 0, 25, None, False),
        ("conformance.embed", 1, 3, "file:///e/", False),
        ("conformance.tick", 1, 25, None, True),
        ("conformance.summarize", 2, 25, "file:///s", False)]
    with pytest.raises(InvalidJob) as info:
        await queue.enqueue_many([Embed(uri="ok"), BadSubject(uri="x")])
    assert info.value.index == 1 and "subject()" in str(info.value)
    assert await queue.count() == 4


class BadSubject(venturi.Task, kind="conformance.bad-subject"):
    uri: str

    def subject(self) -> str | None:
        return "a\x00b"

    async def run(self, ctx: venturi.Context) -> None:
        return None
