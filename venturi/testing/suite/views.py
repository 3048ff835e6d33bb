"""The reads a dashboard pages with, through the Queue handle: history by subject
and creation time, dead jobs by their death, claimed jobs by their lease, periodic
occurrences, finished jobs per minute, and bounded counts."""

from __future__ import annotations

import datetime as dt

import pytest

from ... import FinishedMinute, InvalidJobId, ManualClock, Queue, Status
from ..._ids import uuid7_floor, uuid7_time
from ...store.base import Action, JobRecord, Store
from ..builders import add, claim_one, new_job, request, settlement

S = dt.timedelta(seconds=1)


async def _all_pages(fetch: object, cursor_arg: str, **kw: object) -> list[list[JobRecord]]:
    pages: list[list[JobRecord]] = []
    cursor = None
    while True:
        page = await fetch(**kw, **{cursor_arg: cursor})  # type: ignore[operator]
        pages.append(page.jobs)
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


async def test_history_of_a_subject_subtree_pages_newest_first(queue: Queue, store: Store) -> None:
    subjects = ["s://a", "s://a/1", "s://ab", "s://a/2/x", "s://b", "s://a%"]
    jobs = await add(store, *[new_job("k" if n % 2 else "m", subject=s)
                              for n, s in enumerate(subjects)])
    want = [j.id for j in reversed(jobs) if j.subject in ("s://a", "s://a/1", "s://a/2/x")]
    pages = await _all_pages(queue.history, "before", subject="s://a/", limit=2)
    assert [j.id for page in pages for j in page] == want
    assert [len(page) for page in pages] == [2, 1]
    assert [j.subject for j in (await queue.history(subject="s://a", kind="k")).jobs] == [
        "s://a/2/x", "s://a/1"]
    claimed = await claim_one(store, "m")
    assert [j.id for j in (await queue.history(subject="s://a", status="claimed")).jobs] == [
        claimed.id]
    assert (await queue.history(subject="s://a%")).jobs[0].subject == "s://a%"
    with pytest.raises(ValueError):
        await queue.history(subject="///")


async def test_history_by_creation_time_is_an_id_range(queue: Queue, store: Store) -> None:
    jobs = await add(store, *[new_job() for _ in range(6)])
    ids = sorted(j.id for j in jobs)
    # Ids made in one millisecond share it: bound by the times the ids themselves carry.
    times = sorted(t for t in {uuid7_time(i) for i in ids} if t is not None)
    first, last = times[0], times[-1]
    since = await queue.history(created_since=last)
    assert {j.id for j in since.jobs} == {i for i in ids if i >= uuid7_floor(last)}
    until = await queue.history(created_until=last)
    assert {j.id for j in until.jobs} == {i for i in ids if i < uuid7_floor(last)}
    both = await queue.history(created_since=first, created_until=last + dt.timedelta(
        milliseconds=1), limit=2)
    assert len(both.jobs) == 2 and both.next_cursor is not None
    rest = await queue.history(created_since=first, before=both.next_cursor)
    assert [j.id for j in both.jobs + rest.jobs] == list(reversed(ids))
    with pytest.raises(ValueError):
        await queue.history(created_since=dt.datetime(2030, 1, 1))  # naive
    with pytest.raises(ValueError):
        await queue.history(created_since=last, created_until=first)


async def _kill(store: Store, kind: str, clock: ManualClock, n: int) -> list[JobRecord]:
    dead = []
    for _ in range(n):
        (new,) = await add(store, new_job(kind))
        claimed = await store.claim(request(kind, limit=1))
        assert await store.settle("w/1", settlement(claimed[0], Action.KILL, note="GiveUp"))
        dead.append(claimed[0])
        assert claimed[0].id == new.id
        clock.advance(1)
    return dead


async def test_dead_jobs_page_most_recently_dead_first(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    a = await _kill(store, "a", clock, 3)
    b = await _kill(store, "b", clock, 2)
    # Two deaths in the same instant are ordered by id (the dead jobs' index order).
    (x, y) = await add(store, new_job("a"), new_job("a"))
    for job in await store.claim(request("a", limit=2)):
        assert await store.settle("w/1", settlement(job, Action.KILL))
    (done,) = await add(store, new_job("a"))
    assert await store.settle("w/1", settlement(await claim_one(store, "a"), Action.COMPLETE))
    assert done.id not in {j.id for j in a}

    pages = await _all_pages(queue.dead_jobs, "before", limit=2)
    assert [len(p) for p in pages] == [2, 2, 2, 1]
    order = [j.id for p in pages for j in p]
    assert order == [x.id, y.id, *[j.id for j in reversed(b)], *[j.id for j in reversed(a)]]
    assert all(j.status is Status.DEAD for p in pages for j in p)
    only_b = await queue.dead_jobs(kind="b")
    assert [j.id for j in only_b.jobs] == [j.id for j in reversed(b)]
    assert only_b.next_cursor is None
    when = uuid7_time(b[0].id)
    assert when is not None
    since = await queue.dead_jobs(created_since=when)
    assert {j.id for j in since.jobs} == {i for i in order if i >= uuid7_floor(when)}
    assert {b[0].id, b[1].id, x.id, y.id} <= {j.id for j in since.jobs}
    with pytest.raises(InvalidJobId):
        await queue.dead_jobs(before="nope")
    with pytest.raises(InvalidJobId):
        await queue.dead_jobs(before=str(x.id))


async def test_claimed_jobs_page_soonest_expiry_first(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    await add(store, *[new_job("a") for _ in range(3)], new_job("b"), new_job("c"))
    first = await store.claim(request("a", "b", limit=4, lease=30 * S))
    clock.advance(1)
    second = await store.claim(request("c", limit=1, lease=5 * S))
    pages = await _all_pages(queue.claimed_jobs, "after", limit=3)
    assert [len(p) for p in pages] == [3, 2]
    order = [j.id for p in pages for j in p]
    assert order == [second[0].id, *sorted(j.id for j in first)]
    assert [j.kind for j in (await queue.claimed_jobs(kind="a")).jobs] == ["a", "a", "a"]


async def test_periodic_jobs_are_the_live_occurrences(queue: Queue, store: Store) -> None:
    assert await queue.periodic_jobs() == []
    assert await store.seed_periodic([new_job("tick", periodic=True),
                                      new_job("tock", periodic=True)]) == 2
    await add(store, new_job("plain"))
    claimed = await claim_one(store, "tock")
    live = await queue.periodic_jobs()
    assert [(j.kind, j.status) for j in live] == [("tick", Status.PENDING),
                                                 ("tock", Status.CLAIMED)]
    assert live[1].id == claimed.id
    assert await store.settle("w/1", settlement(claimed, Action.COMPLETE))
    assert [j.kind for j in await queue.periodic_jobs()] == ["tick"]


async def test_finished_per_minute_counts_each_minute_and_kind(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    clock.advance(60 - clock.now().second)  # the test's minutes start on the minute
    start = clock.now()
    await add(store, *[new_job("a") for _ in range(4)], new_job("b"), new_job("b"))
    for kind, action, advance in (("a", Action.COMPLETE, 0), ("a", Action.KILL, 0),
                                  ("b", Action.COMPLETE, 61), ("a", Action.COMPLETE, 0),
                                  ("b", Action.COMPLETE, 120)):
        clock.advance(advance)
        assert await store.settle("w/1", settlement(await claim_one(store, kind), action))

    def minutes(got: list[FinishedMinute]) -> list[tuple[int, str, int, int]]:
        assert all(m.minute.second == 0 and m.minute.microsecond == 0 for m in got)
        return [(int((m.minute - start).total_seconds()) // 60, m.kind, m.completed, m.dead)
                for m in got]

    assert minutes(await queue.finished_per_minute(start - 60 * S)) == [
        (0, "a", 1, 1), (1, "a", 1, 0), (1, "b", 1, 0), (3, "b", 1, 0)]
    # A bounded read keeps the most recently finished jobs.
    assert minutes(await queue.finished_per_minute(start, limit=1)) == [(3, "b", 1, 0)]
    assert minutes(await queue.finished_per_minute(start, limit=3)) == [
        (1, "a", 1, 0), (1, "b", 1, 0), (3, "b", 1, 0)]
    assert minutes(await queue.finished_per_minute(start, start + 61 * S)) == [
        (0, "a", 1, 1)]
    assert await queue.finished_per_minute(clock.now() + S) == []
    with pytest.raises(ValueError):
        await queue.finished_per_minute(dt.datetime(2030, 1, 1))


async def test_counts_with_creation_bounds_and_a_cap(queue: Queue, store: Store) -> None:
    jobs = await add(store, *[new_job("a" if n < 5 else "b", subject=f"s://{n % 2}/{n}")
                              for n in range(8)])
    assert await queue.count(at_most=3) == 3
    assert await queue.count(kind="a", at_most=100) == 5
    assert await queue.count(subject="s://0", at_most=2) == 2
    assert await queue.count(statuses=["completed"], at_most=2) == 0
    newest = max(j.id for j in jobs)
    when = uuid7_time(newest)
    assert when is not None
    expect = sum(1 for j in jobs if j.id >= uuid7_floor(when))
    assert await queue.count(created_since=when) == expect
    assert await queue.count(created_until=when) == 8 - expect
    assert await queue.count(created_until=when, at_most=1) == min(1, 8 - expect)
    assert await queue.count(subject="s://1", created_since=when) == sum(
        1 for j in jobs if j.id >= uuid7_floor(when) and str(j.subject).startswith("s://1/"))
    with pytest.raises(ValueError):
        await queue.count(at_most=-1)
