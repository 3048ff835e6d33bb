"""One plain job: ``Store.enqueue_plain``, the short path ``Queue.enqueue`` takes for a
plain task (no subject, dedup key, schedule or dependency), against the general
``enqueue``: the same row, the same wake-ups, the same errors."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import venturi
from venturi import Enqueued, InvalidJob, ManualClock, Queue
from venturi._ids import uuid7
from venturi.store.base import CountFilter, NewJob, PlainJob, Store
from venturi.testing.tasks import Embed, Refresh, Tick, Urgent

S = dt.timedelta(seconds=1)


async def _row(queue: Queue, id: Any) -> Any:
    row = await queue.job(id)
    assert row is not None
    return row


PLAIN_COLUMNS = ("kind", "payload", "priority", "max_failures", "status", "created_at",
                 "visible_at", "subject", "dedup_key", "carry", "periodic", "trace_context",
                 "run_count", "failure_count", "limit_key")


def _columns(row: Any) -> tuple[Any, ...]:
    return tuple(getattr(row, name) for name in PLAIN_COLUMNS)


async def test_enqueue_plain_stores_and_wakes_as_enqueue_would(
    store: Store, clock: ManualClock
) -> None:
    from .transitions import wakeups

    plain = PlainJob(uuid7(), "conformance.plain", '{"n": 1, "s": "é"}', 0, 7)
    general = NewJob(uuid7(), "conformance.plain", '{"n": 1, "s": "é"}', priority=0,
                     max_failures=7)
    async with store.listen() as listener:
        await store.enqueue_plain(plain)
        fast = await wakeups(store, listener)
    async with store.listen() as listener:
        assert await store.enqueue([general]) == [Enqueued(general.id, False)]
        slow = await wakeups(store, listener)
    assert fast == slow == [("conformance.plain", None)]
    rows = [await store.job(plain.id), await store.job(general.id)]
    assert rows[0] is not None and rows[1] is not None
    assert _columns(rows[0]) == _columns(rows[1])
    assert rows[0].created_at == rows[0].visible_at == clock.now()
    assert plain.job() == NewJob(plain.id, "conformance.plain", '{"n": 1, "s": "é"}',
                                 priority=0, max_failures=7)


BAD_PLAIN: list[tuple[str, dict[str, Any]]] = [
    ("nul-payload", {"payload": '{"a": "\\u0000"}'}),
    ("priority", {"priority": 3}),
    ("bool-priority", {"priority": True}),
    ("max-failures", {"max_failures": 0}),
    ("nul-kind", {"kind": "k\x00"}),
    ("surrogate-kind", {"kind": "k\ud800"}),
]


@pytest.mark.parametrize(("name", "bad"), BAD_PLAIN, ids=[b[0] for b in BAD_PLAIN])
async def test_enqueue_plain_refuses_what_enqueue_refuses_in_the_same_words(
    store: Store, name: str, bad: dict[str, Any]
) -> None:
    fields: dict[str, Any] = {"id": uuid7(), "kind": "k", "payload": "{}", "priority": 1,
                              "max_failures": 25, **bad}
    with pytest.raises(InvalidJob) as fast:
        await store.enqueue_plain(PlainJob(**fields))
    with pytest.raises(InvalidJob) as slow:
        await store.enqueue([NewJob(**fields)])
    assert str(fast.value) == str(slow.value) and fast.value.index is None
    assert "\n" not in str(fast.value)
    assert await store.count(CountFilter()) == 0


class _Counting:
    """Records which of a store's enqueue_plain and enqueue the Queue called (wrapping
    its own: an enqueue that enqueue_plain makes, as the base Store's does, is not
    counted)."""

    def __init__(self, store: Store) -> None:
        self.calls: list[str] = []
        self._inside = False
        plain, general = store.enqueue_plain, store.enqueue

        async def enqueue_plain(job: PlainJob, *, conn: Any = None) -> None:
            self.calls.append("plain")
            self._inside = True
            try:
                await plain(job, conn=conn)
            finally:
                self._inside = False

        async def enqueue(jobs: Any, **kw: Any) -> Any:
            if not self._inside:
                self.calls.append("enqueue")
            return await general(jobs, **kw)

        store.enqueue_plain = enqueue_plain  # type: ignore[method-assign]
        store.enqueue = enqueue  # type: ignore[method-assign]


async def test_queue_enqueue_of_a_plain_task_takes_the_plain_path_with_the_same_row(
    queue: Queue, store: Store, clock: ManualClock
) -> None:
    counting = _Counting(store)
    fast = await queue.enqueue(Urgent(n=3))
    slow = await queue.enqueue(Urgent(n=3), priority="high")  # an option: the general path
    assert counting.calls == ["plain", "enqueue"]
    assert fast == Enqueued(fast.id, False) and fast.id < slow.id
    assert _columns(await _row(queue, fast.id)) == _columns(await _row(queue, slow.id))
    # Not plain: a subject, a dedup key, a periodic class, delay=, after=.
    await queue.enqueue(Embed(uri="file:///e"))
    await queue.enqueue(Refresh(uri="r"))
    await queue.enqueue(Tick())
    await queue.enqueue(Urgent(n=4), delay=S)
    await queue.enqueue(Urgent(n=5), after=[fast.id])
    assert counting.calls == ["plain"] + ["enqueue"] * 6


async def test_queue_enqueue_refuses_a_bad_plain_payload_as_the_general_path_does(
    store: Store
) -> None:
    small = Queue(store, max_payload_bytes=100)
    for bad in (Urgent(n=2**70), Embed(uri="x" * 200)):  # plain, and not plain
        with pytest.raises(InvalidJob) as info:
            await small.enqueue(bad)
        assert "\n" not in str(info.value)
    with pytest.raises(InvalidJob) as fast:
        await small.enqueue(Blob(data="x" * 200))
    with pytest.raises(InvalidJob) as slow:
        await small.enqueue(Blob(data="x" * 200), priority="normal")
    assert str(fast.value) == str(slow.value) and "100-byte limit" in str(fast.value)
    assert await small.count() == 0


class Blob(venturi.Task, kind="conformance.blob"):
    """A plain task with a payload of any size."""

    data: Any = None

    async def run(self, ctx: venturi.Context) -> None:
        return None
