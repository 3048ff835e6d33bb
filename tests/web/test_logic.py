"""The dashboard's pure parts: filters from the URL, bulk plans, chart series."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from venturi import FinishedMinute, Snapshot, Status
from venturi._ids import uuid7
from venturi.web import bulk
from venturi.web.filters import (
    COUNT_CAP,
    FilterError,
    JobFilter,
    Total,
    id_time,
    known_count,
    uuid7_floor,
)
from venturi.web.samples import MAX_LAG_SERIES, WINDOW, Samples

SNAP = Snapshot(pending_by_kind={"a": 3, "b": 1}, scheduled_by_kind={"a": 2},
                claimed_by_kind={"a": 1}, dead_by_kind={"a": 4, "b": 5},
                completed_by_kind={"a": 30, "b": 10},
                counts_by_status={"pending": 6, "claimed": 1, "completed": 40, "dead": 9})


def test_uuid7_floor_orders_ids_by_creation_millisecond() -> None:
    before = uuid7()
    floor = uuid7_floor(dt.datetime.now(dt.UTC) + dt.timedelta(milliseconds=2))
    assert before < floor
    stamp = id_time(before)
    assert stamp is not None and uuid7_floor(stamp) <= before
    assert id_time(uuid.uuid4()) is None


def test_filter_round_trips_through_the_url() -> None:
    f = JobFilter.parse({"kind": " a ", "status": "dead", "subject": "file:///x/",
                         "since": "2026-01-02T03:04:05.678", "until": ""})
    assert f == JobFilter(kind="a", status=Status.DEAD, subject="file:///x",
                          since=dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC))
    assert JobFilter.parse(f.params()) == f
    assert JobFilter.parse({}).empty


@pytest.mark.parametrize(("params", "message"), [
    ({"status": "running"}, "status: 'running' is not one of"),
    ({"since": "yesterday"}, "since: 'yesterday' is not a date"),
    ({"since": "2026-01-02T00:00", "until": "2026-01-01T00:00"}, "since must be earlier"),
    ({"subject": "///"}, "empty after stripping"),
])
def test_bad_filters_name_the_field(params: dict[str, str], message: str) -> None:
    with pytest.raises(FilterError, match=message):
        JobFilter.parse(params)


@pytest.mark.parametrize(("micro", "second", "shown"), [
    (590_000, 9, "2026-12-01T10:30:09.59"), (500_000, 9, "2026-12-01T10:30:09.5"),
    (123_000, 9, "2026-12-01T10:30:09.123"), (0, 9, "2026-12-01T10:30:09"),
    (0, 0, "2026-12-01T10:30"),
])
def test_time_bounds_are_shown_as_a_browser_normalises_them(
        micro: int, second: int, shown: str) -> None:
    """A datetime-local field's value is the shortest form: the page must render the
    same text, or the field and the filter it applied disagree."""
    when = dt.datetime(2026, 12, 1, 10, 30, second, micro, tzinfo=dt.UTC)
    params = JobFilter(since=when).params()
    assert params["since"] == shown
    assert JobFilter.parse(params).since == when


def test_known_counts_come_from_the_stats_only() -> None:
    assert known_count(JobFilter(), SNAP) == 56
    assert known_count(JobFilter(status=Status.PENDING, kind="a"), SNAP) == 5
    assert known_count(JobFilter(status=Status.DEAD), SNAP) == 9
    assert known_count(JobFilter(status=Status.COMPLETED), SNAP) == 40
    assert known_count(JobFilter(status=Status.COMPLETED, kind="b"), SNAP) == 10
    assert known_count(JobFilter(kind="a"), SNAP) == 3 + 2 + 1 + 30 + 4
    assert known_count(JobFilter(status=Status.DEAD, subject="s"), SNAP) is None
    assert known_count(JobFilter(since=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)), SNAP) is None


def test_bulk_plans_cover_every_filter_with_a_count() -> None:
    retry = bulk.plan("retry", JobFilter(status=Status.DEAD), SNAP, Total(9))
    assert retry == bulk.Plan("retry", 9, "retry-kinds", ("a", "b"))
    assert isinstance(bulk.plan("retry", JobFilter(status=Status.PENDING), SNAP, Total(6)),
                      bulk.Refusal)
    assert bulk.plan("cancel", JobFilter(subject="s"), SNAP, Total(7)) == bulk.Plan(
        "cancel", 7, "cancel-subject")
    # A subject with more in the filter: its matching jobs, walked, not the subtree.
    narrowed = bulk.plan("cancel", JobFilter(subject="s", status=Status.DEAD), SNAP, Total(1))
    assert narrowed == bulk.Plan("cancel", 1, "walk")
    walk = bulk.plan("cancel", JobFilter(kind="a", status=Status.PENDING), SNAP, Total(5))
    assert walk == bulk.Plan("cancel", 5, "walk")
    big = bulk.Plan("cancel", 50_000, "walk")
    assert big.touches == bulk.WALK_MAX
    # Time bounds are counted (at most COUNT_CAP), so they are acted on too.
    timed = JobFilter(status=Status.DEAD, since=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    capped = bulk.plan("retry", timed, SNAP, Total(COUNT_CAP, exact=False))
    assert capped == bulk.Plan("retry", COUNT_CAP, "walk", exact=False)
    assert capped.touches == bulk.WALK_MAX
    recent = JobFilter(since=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert bulk.plan("cancel", recent, SNAP, Total(3)) == bulk.Plan("cancel", 3, "walk")
    for refused in (JobFilter(), JobFilter(kind="a")):
        assert isinstance(bulk.plan("cancel", refused, SNAP, Total(56)), bulk.Refusal)


def snap(completed: int, dead: int = 0, lag: dict[str, float] | None = None) -> Snapshot:
    return Snapshot(completed_total_by_kind={"k": completed}, dead_total_by_kind={"k": dead},
                    oldest_pending_age={k: dt.timedelta(seconds=v)
                                        for k, v in (lag or {}).items()})


def test_throughput_is_the_growth_of_the_finish_counters() -> None:
    s = Samples(interval=10)
    for i, (completed, dead) in enumerate([(0, 0), (100, 0), (250, 50), (40, 50), (60, 60)]):
        s.add(snap(completed, dead), at=1000 + 10 * i, mono=10 * i)
    series = s.series()
    assert series["x"] == [1000, 1010, 1020, 1030, 1040]
    assert series["completed"] == [None, 10.0, 15.0, None, 2.0]
    assert series["dead"] == [None, 0.0, 5.0, None, 1.0]
    # Counters only fall when the table was truncated: a gap, not negative work.


def test_the_hour_before_the_start_comes_from_finished_at() -> None:
    start = 1_800_000_000.0  # a whole minute
    minute = dt.datetime.fromtimestamp(start, dt.UTC)

    def at(minutes_back: int, kind: str, completed: int, dead: int = 0) -> FinishedMinute:
        return FinishedMinute(minute - dt.timedelta(minutes=minutes_back), kind, completed, dead)

    rows = [at(3, "a", 60), at(2, "a", 30, 6), at(2, "b", 30), at(1, "a", 120), at(0, "a", 5)]
    s = Samples(interval=10)
    s.backfill(rows, limit=1000, start=start)
    s.add(snap(0), at=start + 5, mono=0)
    s.add(snap(20, 10), at=start + 15, mono=10)
    series = s.series()
    # Minutes ending by the start, then the samples; the minute still running is left out.
    assert series["x"] == [start - 120, start - 60, start, start + 5, start + 15]
    assert series["completed"] == [1.0, 1.0, 2.0, None, 2.0]
    assert series["dead"] == [0.0, 0.1, 0.0, None, 1.0]
    assert series["history"] == 3
    # A read that stopped at its limit: its oldest minute is partial, and dropped.
    s = Samples(interval=10)
    s.backfill(rows, limit=251, start=start)
    assert s.series()["x"] == [start - 60, start]


def test_lag_series_keep_the_kinds_that_waited_longest() -> None:
    s = Samples(interval=1)
    lags = {f"k{i}": float(i) for i in range(MAX_LAG_SERIES + 3)}
    s.add(snap(0, lag=lags), at=0, mono=0)
    s.add(snap(0, lag={"k0": 99.0}), at=1, mono=1)
    series = s.series()
    assert len(series["kinds"]) == MAX_LAG_SERIES
    assert "k0" in series["kinds"] and "k1" not in series["kinds"]
    k0 = series["kinds"].index("k0")
    assert series["lag"][k0] == [0.0, 99.0]


def test_samples_keep_an_hour() -> None:
    s = Samples(interval=60)
    for i in range(200):
        s.add(snap(i), at=60.0 * i, mono=60.0 * i)
    xs = s.series()["x"]
    assert xs[-1] - xs[0] <= WINDOW and len(xs) <= WINDOW / 60 + 2


def test_a_costly_refresh_stretches_the_period() -> None:
    from venturi import MemoryStore, Queue
    from venturi.web.live import COST_FACTOR, Hub

    hub = Hub(Queue(MemoryStore()), refresh=2.0, sample_interval=10, min_gap=0.5)
    assert hub.periods() == (2.0, 0.5)
    hub.cost = 0.58  # stats() on 1,100,000 rows (docs/operations/dashboard.md)
    assert hub.periods() == (COST_FACTOR * 0.58, COST_FACTOR * 0.58)


async def test_closing_the_hub_ends_its_loop_even_as_a_notice_wakes_it() -> None:
    """A notice that wakes the refresh loop in the very step that aclose() cancels it. On
    Python 3.11, asyncio.wait_for handed the loop the notice and dropped the cancel
    (CPython gh-86296): the loop went on, and aclose(), a server's shutdown, never
    returned (a dashboard test's server once waited out its 15 s on it)."""
    import asyncio

    from venturi import MemoryStore, Queue
    from venturi.web.live import Hub

    from ..conftest import wait_for

    hub = Hub(Queue(MemoryStore()), refresh=2.0, sample_interval=60, min_gap=0.0)
    hub.ensure_started()
    dirty = hub._dirty
    assert dirty is not None

    def waiting() -> bool:  # the refresh loop waits for a notice, up to the next sample
        return hub.listening and hub.snapshot is not None and bool(dirty._waiters)  # type: ignore[attr-defined]

    tasks = list(hub._tasks)
    await wait_for(waiting, what="the refresh loop waiting for a notice")
    loop_time = asyncio.get_running_loop().time
    async with asyncio.timeout(10):
        began = loop_time()
        dirty.set()  # the notice, then the cancel in the same step: nothing between
        await hub.aclose()
    assert loop_time() - began < 5, "aclose() waited for a loop that lost its cancel"
    assert all(t.done() for t in tasks)
