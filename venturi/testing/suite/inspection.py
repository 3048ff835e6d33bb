"""Subject subtrees, count, cancel (docs/concepts/leases.md, cancellation), stats,
detail, history, retry and cleanup through the Queue handle."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import orjson
import pytest

from venturi import ManualClock, Outcome, Queue, Status
from venturi.store.base import Action, Store
from venturi.testing.builders import add, claim_one, new_job, request, settlement
from venturi.testing.tasks import Embed, Summarize

S = dt.timedelta(seconds=1)

SUBJECTS = [
    "file:///a", "file:///a/x/y", "file:///a/%/_", "file:///ab", "file:///a0",
    "file:///a%", "file:///a_b", "file:///axb", "file:///a\\b", "file:///a'q\"",
    "file:///A",
]


async def _subjects(queue: Queue) -> dict[str, Any]:
    ids = await queue.enqueue_many([Embed(uri=s) for s in SUBJECTS])
    await queue.enqueue(Summarize(uri="file:///a/other-kind"))
    return dict(zip(SUBJECTS, ids, strict=True))


@pytest.mark.parametrize(("query", "expected"), [
    ("file:///a", 4),  # itself, a/x/y, a/%/_ and the Summarize job
    ("file:///a/", 4),
    ("file:///a///", 4),
    ("file:///a/x", 1),
    ("file:///a%", 1),  # % is literal (as LIKE it would match a, ab, a0, ...)
    ("file:///a_b", 1),  # _ is literal (as LIKE it would match axb)
    ("file:///a\\b", 1),
    ("file:///a'q\"", 1),
    ("file:///", 12),
    ("file:///b", 0),
])
async def test_subject_subtree_is_literal(queue: Queue, query: str, expected: int) -> None:
    await _subjects(queue)
    assert await queue.count(subject=query) == expected


async def test_count_by_kind_subject_and_statuses(queue: Queue, store: Store) -> None:
    ids = await _subjects(queue)
    claimed = await claim_one(store, "conformance.summarize")
    assert await queue.count(kind="conformance.embed") == len(SUBJECTS)
    assert await queue.count(kind="conformance.summarize", subject="file:///a") == 1
    assert await queue.count(kind="conformance.embed", subject="file:///a") == 3
    assert await queue.count(subject="file:///a", statuses=["pending"]) == 3
    assert await queue.count(subject="file:///a", statuses=[Status.CLAIMED]) == 1
    assert await queue.count(statuses=["claimed", "completed"]) == 1
    assert await queue.count() == len(SUBJECTS) + 1
    assert claimed.subject == "file:///a/other-kind" and ids
    with pytest.raises(ValueError, match="status"):
        await queue.count(statuses=["running"])


async def test_cancel_by_subject_deletes_the_subtree_and_journals(
    queue: Queue, store: Store
) -> None:
    ids = await _subjects(queue)
    claimed = await claim_one(store, "conformance.summarize")
    assert await store.settle("w/1", settlement(claimed, Action.RELEASE))
    assert await queue.cancel(subject="file:///a/") == 4
    for subject in ("file:///a", "file:///a/x/y", "file:///a/%/_"):
        assert await queue.job(ids[subject]) is None
        assert await queue.journal(ids[subject]) == []
    assert await queue.journal(claimed.id) == []
    assert await queue.count() == len(SUBJECTS) - 3
    assert await queue.job(ids["file:///ab"]) is not None
    assert await queue.cancel(subject="file:///a%") == 1
    assert await queue.cancel(subject="file:///a") == 0


async def test_cancel_by_ids(queue: Queue) -> None:
    ids = await _subjects(queue)
    assert await queue.cancel(ids=[ids["file:///ab"], str(ids["file:///A"])]) == 2
    assert await queue.cancel(ids=[ids["file:///ab"]]) == 0
    assert await queue.count() == len(SUBJECTS) - 1


@pytest.mark.parametrize("kwargs", [{}, {"subject": ""}, {"subject": "/"}, {"subject": "///"},
                                    {"ids": [], "subject": "file:///a"}])
async def test_cancel_refuses_to_match_everything(queue: Queue, kwargs: dict[str, Any]) -> None:
    await _subjects(queue)
    with pytest.raises(ValueError):
        await queue.cancel(**kwargs)
    with pytest.raises(ValueError):
        await queue.count(subject="//")
    assert await queue.count() == len(SUBJECTS) + 1


async def test_cancel_of_a_claimed_job_notifies_its_owner(queue: Queue, store: Store) -> None:
    ids = await _subjects(queue)
    async with store.listen() as listener:
        claimed = await claim_one(store, "conformance.summarize")
        assert await queue.cancel(ids=[ids["file:///ab"]]) == 1  # pending: nobody to tell
        assert await queue.cancel(subject="file:///a") == 4
        message = None
        while message is None:
            channel, payload = await asyncio.wait_for(listener.receive(), timeout=10)
            if channel == "control":
                message = orjson.loads(payload)
    assert message == {"op": "cancel", "ids": [str(claimed.id)]}
    assert await queue.job(claimed.id) is None


async def test_stats_separates_runnable_from_scheduled(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    await add(store, new_job("a", delay=10), new_job("b", delay=3600), new_job("c"),
              new_job("d"), new_job("e"))
    await claim_one(store, "c")
    assert await store.settle("w/1", settlement(await claim_one(store, "d"), Action.KILL))
    assert await store.settle("w/1", settlement(await claim_one(store, "e"), Action.COMPLETE))
    clock.advance(30)
    await add(store, new_job("a"))

    snap = await queue.stats()
    assert snap.pending_by_kind == {"a": 2}
    assert snap.scheduled_by_kind == {"b": 1}
    # Waiting since it became visible (t0+10), not since it was created (t0).
    assert snap.oldest_pending_age == {"a": 20 * S}
    assert snap.claimed == 1 and snap.claimed_by_kind == {"c": 1}
    assert snap.dead_by_kind == {"d": 1}
    assert snap.counts_by_status == {"pending": 3, "claimed": 1, "completed": 1, "dead": 1}


async def test_detail_reports_lag_and_dead_jobs_newest_first(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    assert (await queue.detail()).oldest_pending_age is None
    await add(store, new_job("x", subject="file:///x", max_failures=1), new_job("y"),
              new_job("z", delay=5), new_job("future", delay=3600))
    x = await claim_one(store, "x")
    assert await store.settle("w/1", settlement(x, Action.FAIL, note="ValueError"))
    clock.advance(2)
    y = await claim_one(store, "y")
    assert await store.settle("w/1", settlement(y, Action.KILL, note="unsupported-format"))
    clock.advance(10)

    detail = await queue.detail(limit=10)
    assert detail.oldest_pending_age == 7 * S  # z, visible since t0+5; the future job is not lag
    assert [(f.id, f.kind, f.subject, f.reason) for f in detail.failed] == [
        (y.id, "y", None, "unsupported-format"), (x.id, "x", "file:///x", "ValueError")]
    assert [f.finished_at for f in detail.failed] == [clock.now() - 10 * S,
                                                      clock.now() - 12 * S]
    assert [f.id for f in (await queue.detail(limit=1)).failed] == [y.id]


async def test_history_pages_newest_first_with_filters(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    jobs = await add(store, *[new_job("a" if n % 2 else "b") for n in range(5)])
    newest_first = [j.id for j in reversed(jobs)]
    seen, cursor, pages = [], None, 0
    while True:
        page = await queue.history(limit=2, before=cursor)
        seen += [j.id for j in page.jobs]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == newest_first and pages == 3

    full = await queue.history(limit=5)
    assert [j.id for j in full.jobs] == newest_first and full.next_cursor is None
    assert [j.kind for j in (await queue.history(kind="a")).jobs] == ["a", "a"]

    first = await claim_one(store, "b")
    assert await store.settle("w/1", settlement(first, Action.COMPLETE))
    clock.advance(60)
    second = await claim_one(store, "b")
    assert await store.settle("w/1", settlement(second, Action.COMPLETE))
    done = await queue.history(status="completed")
    assert {j.id for j in done.jobs} == {first.id, second.id}
    recent = await queue.history(finished_since=clock.now() - 30 * S)
    assert [j.id for j in recent.jobs] == [second.id]
    assert (await queue.history(status=Status.DEAD)).jobs == []
    with pytest.raises(ValueError):
        await queue.history(limit=0)


async def test_retry_redrives_dead_jobs_only(queue: Queue, store: Store) -> None:
    dead_a, _dead_b, done, pending = await add(store, new_job("a"), new_job("b"), new_job("c"),
                                              new_job("d"))
    for kind, action in (("a", Action.KILL), ("b", Action.KILL), ("c", Action.COMPLETE)):
        assert await store.settle("w/1", settlement(await claim_one(store, kind), action))

    assert await queue.retry(ids=[dead_a.id, done.id, pending.id]) == 1
    row = await queue.job(dead_a.id)
    assert row is not None and (row.status, row.failure_count, row.finished_at) == (
        Status.PENDING, 0, None)
    assert [(e.run_no, e.outcome) for e in await queue.journal(dead_a.id)] == [
        (1, Outcome.DEAD), (1, Outcome.REDRIVEN)]
    for untouched, status in ((done, Status.COMPLETED), (pending, Status.PENDING)):
        assert (await queue.job(untouched.id)).status is status  # type: ignore[union-attr]
    assert len(await queue.journal(done.id)) == 1 and await queue.journal(pending.id) == []

    assert await queue.retry(kind="b") == 1
    assert await queue.retry(kind="b") == 0
    assert (await claim_one(store, "b")).run_count == 2
    with pytest.raises(ValueError):
        await queue.retry()
    with pytest.raises(ValueError):
        await queue.retry(kind="b", status="pending")


async def test_cleanup_removes_only_old_terminal_jobs(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    old_done, old_dead, old_other, new_done, pending, claimed = await add(
        store, new_job("a"), new_job("a"), new_job("b"), new_job("a"), new_job("a", delay=1),
        new_job("c"))
    for action in (Action.COMPLETE, Action.KILL):
        assert await store.settle("w/1", settlement(await claim_one(store, "a"), action))
    assert await store.settle("w/1", settlement(await claim_one(store, "b"), Action.COMPLETE))
    await claim_one(store, "c")
    clock.advance(100)
    assert await store.settle("w/1", settlement(await claim_one(store, "a"), Action.COMPLETE))

    cutoff = clock.now() - 50 * S
    assert await queue.cleanup(finished_before=cutoff, kind="a", status="dead") == 1
    assert await queue.job(old_dead.id) is None and await queue.journal(old_dead.id) == []
    assert await queue.cleanup(finished_before=cutoff, kind="a") == 1
    assert await queue.job(old_done.id) is None
    assert await queue.cleanup(finished_before=cutoff) == 1
    assert await queue.job(old_other.id) is None
    assert await queue.cleanup(finished_before=cutoff) == 0
    for kept in (new_done, pending, claimed):
        assert await queue.job(kept.id) is not None
    assert len(await queue.journal(new_done.id)) == 1
    with pytest.raises(ValueError):
        await queue.cleanup(finished_before=clock.now(), status="pending")


async def test_cancel_notices_are_chunked_by_100_ids(queue: Queue, store: Store) -> None:
    await add(store, *[new_job("bulk", subject=f"s://x/{n}") for n in range(150)])
    async with store.listen() as listener:
        claimed = await store.claim(request("bulk", limit=150))
        assert await queue.cancel(subject="s://x") == 150
        notices: list[Any] = []
        while sum(len(n["ids"]) for n in notices) < 150:
            channel, payload = await asyncio.wait_for(listener.receive(), timeout=10)
            if channel == "control":
                notices.append(orjson.loads(payload))
    assert sorted(len(n["ids"]) for n in notices) == [50, 100]
    assert {i for n in notices for i in n["ids"]} == {str(j.id) for j in claimed}


async def test_ids_that_are_not_uuids_are_refused(queue: Queue) -> None:
    from venturi import InvalidJobId

    for call in (queue.job("nope"), queue.journal("nope"), queue.cancel(ids=["nope"]),
                 queue.retry(ids=["nope"]), queue.history(before="nope")):
        with pytest.raises(InvalidJobId):
            await call
