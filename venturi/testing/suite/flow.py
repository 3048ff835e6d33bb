"""Flow control (docs/concepts/flow-control.md): a kind's pause and limits, the claim of
limited kinds per limit key, the rate window, and what ``kind_states`` reports."""

from __future__ import annotations

import datetime as dt
from uuid import UUID

from venturi import ManualClock, Status
from venturi.store.base import Action, JobRecord, KindChange, Limits, Rate, Store
from venturi.testing.builders import add, new_job, request, settlement

SECOND = dt.timedelta(seconds=1)


async def _state(store: Store, kind: str):  # type: ignore[no-untyped-def]
    found = [k for k in await store.kind_states() if k.kind == kind]
    assert found, f"no state for {kind}"
    return found[0]


async def test_a_paused_kind_is_claimed_by_neither_claim_until_resumed(store: Store) -> None:
    a, b = await add(store, new_job("a"), new_job("b"))
    await store.control_kind(KindChange("a", paused=True))
    assert [j.id for j in await store.claim(request("a", "b"))] == [b.id]
    assert (await store.claim_limited(request("a"))).jobs == []
    assert (await store.job(a.id)).status is Status.PENDING  # type: ignore[union-attr]
    state = await _state(store, "a")
    assert state.paused and state.held == "paused" and state.pending == 1

    await store.control_kind(KindChange("a", paused=False))
    assert [j.id for j in await store.claim(request("a"))] == [a.id]
    assert (await _state(store, "a")).held is None


async def test_a_kind_with_only_pending_jobs_is_reported(store: Store) -> None:
    # No worker declared it and no operator controlled it: its backlog still shows, so
    # an operator sees the jobs of a kind nobody serves.
    await add(store, new_job("orphan"), new_job("orphan"), new_job("served"))
    await store.declare_kinds({"served": Limits()})
    states = {k.kind: k for k in await store.kind_states()}
    orphan = states["orphan"]
    assert (orphan.pending, orphan.claimed, orphan.paused, orphan.held) == (2, 0, False, None)
    assert orphan.limits == Limits() and states["served"].pending == 1
    await store.claim(request("orphan", limit=1))
    orphan = await _state(store, "orphan")
    assert (orphan.pending, orphan.claimed) == (1, 1)


async def test_limited_kinds_are_left_to_the_limited_claim(store: Store) -> None:
    a, b = await add(store, new_job("a"), new_job("b"))
    await store.declare_kinds({"a": Limits(concurrency=5), "b": Limits()})
    assert [j.id for j in await store.claim(request("a", "b"))] == [b.id]
    got = await store.claim_limited(request("a"))
    assert [j.id for j in got.jobs] == [a.id] and not got.more
    assert got.near == frozenset()  # one of five: far from the limit


async def test_concurrency_counts_claims_until_they_settle(store: Store) -> None:
    jobs = await add(store, *[new_job("c") for _ in range(5)])
    await store.declare_kinds({"c": Limits(concurrency=2)})
    first = (await store.claim_limited(request("c", limit=10))).jobs
    assert [j.id for j in first] == [j.id for j in jobs[:2]]  # in claim order
    assert (await store.claim_limited(request("c", limit=10, by="w/2"))).jobs == []
    state = await _state(store, "c")
    assert state.held == "concurrency" and state.claimed == 2 and state.pending == 3
    assert state.limits == Limits(concurrency=2) and state.sources["concurrency"] == "code"

    assert await store.settle("w/1", settlement(first[0], Action.COMPLETE))
    again = (await store.claim_limited(request("c", limit=10, by="w/2"))).jobs
    assert [j.id for j in again] == [jobs[2].id]


async def test_an_operator_limit_overrides_the_code_until_cleared(store: Store) -> None:
    await add(store, *[new_job("o") for _ in range(6)])
    await store.declare_kinds({"o": Limits(concurrency=1)})
    await store.control_kind(KindChange("o", set_concurrency=True, concurrency=3))
    state = await _state(store, "o")
    assert state.limits.concurrency == 3 and state.sources["concurrency"] == "operator"
    assert len((await store.claim_limited(request("o", limit=10))).jobs) == 3

    await store.control_kind(KindChange("o", set_concurrency=True, concurrency=None))
    state = await _state(store, "o")
    assert state.limits.concurrency == 1 and state.sources["concurrency"] == "code"
    assert (await store.claim_limited(request("o", limit=10))).jobs == []  # 3 held >= 1


async def test_an_operator_limit_alone_moves_a_kind_to_the_limited_claim(store: Store) -> None:
    await add(store, *[new_job("p") for _ in range(3)])
    await store.control_kind(KindChange("p", set_concurrency=True, concurrency=1))
    assert await store.claim(request("p")) == []
    assert len((await store.claim_limited(request("p"))).jobs) == 1


async def test_concurrency_applies_per_limit_key_in_order(store: Store) -> None:
    x1, y1, x2, y2, n1 = await add(
        store, new_job("t", limit_key="x"), new_job("t", limit_key="y"),
        new_job("t", limit_key="x"), new_job("t", limit_key="y"), new_job("t"))
    await store.declare_kinds({"t": Limits(concurrency=1)})
    got = await store.claim_limited(request("t", limit=10))
    assert {j.id for j in got.jobs} == {x1.id, y1.id, n1.id}
    assert got.more  # it found x2 and y2 but had no room for them
    assert got.near == {"t"}  # its settlements are worth announcing
    assert (await store.claim_limited(request("t", limit=10))).jobs == []
    done = {j.id: j for j in got.jobs}
    assert await store.settle("w/1", settlement(done[x1.id], Action.COMPLETE))
    assert [j.id for j in (await store.claim_limited(request("t", limit=10))).jobs] == [x2.id]
    assert y2.id  # still waits for y1


async def test_a_recovered_claim_frees_its_budget(store: Store, clock: ManualClock) -> None:
    await add(store, new_job("r"), new_job("r"))
    await store.declare_kinds({"r": Limits(concurrency=1)})
    (held,) = (await store.claim_limited(request("r", lease=SECOND))).jobs
    assert (await store.claim_limited(request("r"))).jobs == []
    clock.advance(2)
    assert [r.id for r in await store.recover_stale()] == [held.id]
    assert len((await store.claim_limited(request("r"))).jobs) == 1


async def test_rate_window_holds_at_most_n_claims(store: Store, clock: ManualClock) -> None:
    await add(store, *[new_job("w") for _ in range(10)])
    await store.declare_kinds({"w": Limits(rate=Rate(3, SECOND))})
    first = await store.claim_limited(request("w", limit=10))
    assert len(first.jobs) == 3
    assert first.retry_at == clock.now() + SECOND  # the oldest claim leaves the window then
    state = await _state(store, "w")
    assert state.held == "rate" and state.started_in_window == 3
    clock.advance(0.5)
    assert (await store.claim_limited(request("w", limit=10))).jobs == []  # settled or not
    clock.advance(0.5)  # [t0 + 1s]: the first three are out of the window (claimed_at > now - 1s)
    assert len((await store.claim_limited(request("w", limit=10))).jobs) == 3


async def test_rate_applies_per_limit_key(store: Store, clock: ManualClock) -> None:
    """``limit_key()`` partitions the rate as it does the concurrency: each key gets its
    own N claims per window (docs/concepts/flow-control.md). A rate of the kind as a whole
    would let only 3 of these 10 be claimed in the window, all of them key x's."""
    xs = await add(store, *[new_job("q", limit_key="x") for _ in range(5)])
    ys = await add(store, *[new_job("q", limit_key="y") for _ in range(5)])
    await store.declare_kinds({"q": Limits(rate=Rate(3, SECOND))})

    def by_key(jobs: list[JobRecord]) -> dict[str | None, list[UUID]]:
        keys: dict[str | None, list[UUID]] = {"x": [], "y": []}
        for j in jobs:
            keys[j.limit_key].append(j.id)
        return keys

    first = (await store.claim_limited(request("q", limit=20))).jobs
    assert len(first) == 6
    assert by_key(first) == {"x": [j.id for j in xs[:3]], "y": [j.id for j in ys[:3]]}
    clock.advance(0.5)
    assert (await store.claim_limited(request("q", limit=20))).jobs == []  # both keys full
    clock.advance(0.5)  # [t0 + 1s]: the first six are out of the window
    again = (await store.claim_limited(request("q", limit=20))).jobs
    assert by_key(again) == {"x": [j.id for j in xs[3:]], "y": [j.id for j in ys[3:]]}


async def test_rate_and_concurrency_together(store: Store) -> None:
    await add(store, *[new_job("b") for _ in range(10)])
    await store.declare_kinds({"b": Limits(concurrency=2, rate=Rate(5, dt.timedelta(minutes=1)))})
    for _ in range(2):
        got = (await store.claim_limited(request("b", limit=10))).jobs
        assert len(got) == 2
        assert (await store.claim_limited(request("b", limit=10))).jobs == []  # two claimed
        for j in got:
            assert await store.settle("w/1", settlement(j, Action.COMPLETE))
    # 4 claims in the minute: one left, although the concurrency would allow two.
    assert len((await store.claim_limited(request("b", limit=10))).jobs) == 1
    assert (await _state(store, "b")).started_in_window == 5


async def test_kind_controls_and_declarations(store: Store) -> None:
    await store.declare_kinds({"d": Limits(concurrency=4, rate=Rate(10, SECOND)), "e": Limits()})
    await store.control_kind(KindChange("d", paused=True, set_rate=True,
                                        rate=Rate(2, dt.timedelta(minutes=1))))
    rows = {r.kind: r for r in await store.kind_controls(["d", "e", "missing"])}
    assert set(rows) == {"d", "e"}
    d = rows["d"]
    assert d.paused and d.code == Limits(4, Rate(10, SECOND))
    assert d.limits == Limits(4, Rate(2, dt.timedelta(minutes=1)))
    assert d.sources == {"concurrency": "code", "rate": "operator"}
    assert not rows["e"].limits.any


async def test_pause_and_limits_are_announced_on_the_control_channel(store: Store) -> None:
    async with store.listen() as listener:
        await store.control_kind(KindChange("n", paused=True))
        channel, payload = await listener.receive()
        assert channel == "control"
        from venturi.notices import KindsChanged, parse_control

        assert parse_control(payload) == KindsChanged(("n",))
        await store.wake_kinds(["n"])
        assert await listener.receive() == ("jobs", "n")
