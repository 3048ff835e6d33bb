"""Counts of finished jobs: ``stats`` and ``count`` agree with the rows themselves
through every change that finishes, revives or removes a job, and the
``*_total_by_kind`` counters grow with each completion and death, never shrinking.

PostgresStore keeps these counts in a tally maintained by triggers instead of
counting the rows (sql/0006_tallies.sql); the ground truth here is the rows read
back page by page through ``history``.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

from ... import ManualClock, Queue, Status
from ...store.base import Action, CleanupCriteria, Store
from ..builders import add, claim_one, new_job, request, settlement

S = dt.timedelta(seconds=1)


async def _rows(queue: Queue) -> Counter[tuple[str, str]]:
    """(kind, status) of every job, read row by row."""
    seen: Counter[tuple[str, str]] = Counter()
    cursor = None
    while True:
        page = await queue.history(before=cursor, limit=500)
        seen.update((j.kind, j.status.value) for j in page.jobs)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


async def _agree(queue: Queue) -> None:
    rows = await _rows(queue)
    snap = await queue.stats()
    by_status = Counter[str]()
    for (_, status), n in rows.items():
        by_status[status] += n
    assert snap.counts_by_status == {s.value: by_status[s.value] for s in Status}
    for status, by_kind in ((Status.COMPLETED, snap.completed_by_kind),
                            (Status.DEAD, snap.dead_by_kind)):
        want = {k: n for (k, s), n in rows.items() if s == status.value}
        assert by_kind == want, status
    for kind in {k for k, _ in rows} | {"nobody"}:
        for statuses in (["completed"], ["dead"], ["completed", "dead"], ["pending", "dead"],
                         None):
            want_n = sum(n for (k, s), n in rows.items()
                         if k == kind and (statuses is None or s in statuses))
            assert await queue.count(kind=kind, statuses=statuses) == want_n, (kind, statuses)
    assert await queue.count(statuses=["completed", "dead"]) == (
        by_status["completed"] + by_status["dead"])


async def test_finished_counts_follow_every_change(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    await add(store, *[new_job("a", max_failures=1) for _ in range(6)],
              *[new_job("b") for _ in range(4)], new_job("p", subject="s://x/1"),
              new_job("p", subject="s://x/2"))
    await _agree(queue)

    # Settling in one batch: completions, a kill, a failure that spends the budget,
    # a retry, a pause and a release.
    claimed = [*await store.claim(request("a", limit=4)), *await store.claim(request("b", limit=4))]
    actions = [Action.COMPLETE, Action.KILL, Action.FAIL, Action.COMPLETE,
               Action.COMPLETE, Action.FAIL, Action.PAUSE, Action.RELEASE]
    results = await store.settle_many("w/1", [settlement(j, a) for j, a in
                                              zip(claimed, actions, strict=True)])
    assert [r.status for r in results] == [
        Status.COMPLETED, Status.DEAD, Status.DEAD, Status.COMPLETED, Status.COMPLETED,
        Status.PENDING, Status.PENDING, Status.PENDING]
    await _agree(queue)
    snap = await queue.stats()
    assert snap.completed_total_by_kind == {"a": 2, "b": 1}
    assert snap.dead_total_by_kind == {"a": 2}

    # A lost lease spends the last of a budget: dead by recovery.
    (last_a,) = await store.claim(request("a", limit=1, lease=S))
    clock.advance(2)
    assert [r.status for r in await store.recover_stale()] == [Status.DEAD]
    await _agree(queue)

    # Redrive brings dead jobs back; dying again counts a second death.
    dead_before = (await queue.stats()).dead_total_by_kind["a"]
    assert await queue.retry(kind="a") == dead_before
    await _agree(queue)
    again = await claim_one(store, "a")
    assert await store.settle("w/1", settlement(again, Action.KILL))
    await _agree(queue)
    assert (await queue.stats()).dead_total_by_kind["a"] == dead_before + 1

    # Finish the p jobs, then cancel one finished job by subject and one by id.
    for _ in range(2):
        assert await store.settle("w/1", settlement(await claim_one(store, "p"), Action.COMPLETE))
    await _agree(queue)
    assert await queue.cancel(subject="s://x/1") == 1
    await _agree(queue)
    finished = (await queue.history(status="completed", kind="b")).jobs
    assert await queue.cancel(ids=[finished[0].id]) == 1
    await _agree(queue)

    for action in (Action.COMPLETE, Action.COMPLETE, Action.KILL):
        assert await store.settle("w/1", settlement(await claim_one(store, "b"), action))
    await _agree(queue)

    # Cleanup and retention delete finished jobs; the totals keep counting them.
    totals = (await queue.stats()).completed_total_by_kind
    clock.advance(60)
    assert await queue.cleanup(finished_before=clock.now(), kind="a") > 0
    await _agree(queue)
    removed = await store.cleanup_exclusive(CleanupCriteria(clock.now(), batch_size=2))
    assert removed == 2
    await _agree(queue)
    assert await store.cleanup(CleanupCriteria(clock.now())) > 0
    await _agree(queue)
    snap = await queue.stats()
    assert snap.completed_by_kind == {} and snap.dead_by_kind == {}
    assert snap.completed_total_by_kind == totals
    assert last_a.kind == "a"
