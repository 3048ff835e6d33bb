"""Bad input gets one clear line from venturi, and nothing already queued is lost."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import venturi
from tests.tasks import Embed
from venturi import (
    ConfigError,
    InvalidJob,
    MemoryStore,
    Queue,
    Status,
    TaskDefinitionError,
    VenturiError,
)
from venturi.store.base import ClaimRequest, Store
from venturi.store.postgres import PostgresStore

EVIL_KIND = "a'; drop table x; --"


class Blob(venturi.Task, kind="test.bad.blob"):
    data: Any = None
    subject_uri: str | None = None
    key: str | None = None

    def subject(self) -> str | None:
        return self.subject_uri

    def dedup_key(self) -> str | None:
        return self.key

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Weird(venturi.Task, kind="test.bad.weird"):
    """Computes its subject or dedup key, so the payload itself stays clean."""

    which: str
    code: int

    def subject(self) -> str | None:
        return f"file:///s{chr(self.code)}" if self.which == "subject" else None

    def dedup_key(self) -> str | None:
        return f"k{chr(self.code)}" if self.which == "key" else None

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Evil(venturi.Task, kind=EVIL_KIND):
    note: str = "$1 %s {prefix} ' \" \\"

    async def run(self, ctx: venturi.Context) -> None:
        return None


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, f"not one line: {text!r}"
    return text


async def refused(queue: Queue, task: venturi.Task, match: str, **kw: Any) -> str:
    """Enqueue must raise InvalidJob naming the problem, in one line, writing nothing."""
    before = await queue.count()
    with pytest.raises(InvalidJob) as info:
        await queue.enqueue(task, **kw)
    message = one_line(info.value)
    assert match in message, message
    assert await queue.count() == before
    return message


@pytest.fixture
async def seeded(queue: Queue) -> Queue:
    """A queue holding one good job, which no refused enqueue may disturb."""
    await queue.enqueue(Embed(uri="file:///keep"))
    return queue


async def assert_kept(queue: Queue) -> None:
    assert await queue.count(subject="file:///keep", statuses=["pending"]) == 1


# --- payloads -----------------------------------------------------------------------


async def test_payload_over_default_limit(seeded: Queue) -> None:
    assert seeded.max_payload_bytes == 1024 * 1024
    message = await refused(seeded, Blob(data="x" * (1024 * 1024)), "over the 1048576-byte limit")
    assert "payload is 1048" in message
    await seeded.enqueue(Blob(data="x" * (1024 * 1024 - 100)))  # just under is fine
    await assert_kept(seeded)


async def test_payload_limit_is_configurable(store: Store) -> None:
    queue = Queue(store, max_payload_bytes=64)
    await refused(queue, Blob(data="y" * 100), "over the 64-byte limit")
    await queue.enqueue(Blob(data="y"))


async def test_payload_limit_via_connect(pg_dsn: str, prefix: str) -> None:
    from tests.conftest import drop_prefix

    try:
        async with Queue.connect(pg_dsn, prefix=prefix, max_payload_bytes=50) as queue:
            await queue.migrate()
            await refused(queue, Blob(data="z" * 60), "over the 50-byte limit")
    finally:
        await drop_prefix(pg_dsn, prefix)


@pytest.mark.parametrize("data", [
    "nul\x00here", {"nested": ["ok", {"deep": "a\x00b"}]}, {"key\x00": 1},
])
async def test_nul_characters_refused(seeded: Queue, data: Any) -> None:
    await refused(seeded, Blob(data=data), "NUL character")
    await assert_kept(seeded)


@pytest.mark.parametrize("data", ["lone \ud800", {"nested": ["\udfff"]}, {"\ud83d": 1}])
async def test_lone_surrogates_refused(seeded: Queue, data: Any) -> None:
    await refused(seeded, Blob(data=data), "surrogates not allowed")
    await assert_kept(seeded)


async def test_escaped_nul_text_is_fine(seeded: Queue) -> None:
    """A literal backslash-u-0000 is six ordinary characters, not a NUL."""
    job = await seeded.enqueue(Blob(data="\\u0000 and \\\\u0000"))
    row = await seeded.job(job.id)
    assert row is not None and row.payload["data"] == "\\u0000 and \\\\u0000"


@pytest.mark.parametrize(("which", "code", "match"), [
    ("subject", 0, "subject() must return a string without NUL"),
    ("subject", 0xD800, "subject() returned a string with a lone surrogate"),
    ("key", 0, "dedup_key() must return a string without NUL"),
    ("key", 0xDC80, "dedup_key() returned a string with a lone surrogate"),
])
async def test_bad_subject_and_dedup_key(seeded: Queue, which: str, code: int,
                                         match: str) -> None:
    await refused(seeded, Weird(which=which, code=code), match)
    await assert_kept(seeded)


@pytest.mark.parametrize(("data", "match"), [
    ({1, 2}, "not JSON-serializable"),
    (object(), "not JSON-serializable"),
    (2**70, "not JSON-serializable"),
    (float("nan"), "NaN or Infinity"),
    ({"x": [1.0, float("inf")]}, "NaN or Infinity"),
])
async def test_non_json_fields_refused(seeded: Queue, data: Any, match: str) -> None:
    await refused(seeded, Blob(data=data), match)
    await assert_kept(seeded)


async def test_bad_item_rejects_whole_batch_naming_it(seeded: Queue) -> None:
    with pytest.raises(InvalidJob) as info:
        await seeded.enqueue_many([Blob(data=1), Blob(data="\x00"), Blob(data=2)])
    message = one_line(info.value)
    assert info.value.index == 1 and message.startswith("job 1: ") and "NUL" in message
    assert "nothing was enqueued" in message
    assert await seeded.count(kind="test.bad.blob") == 0
    await assert_kept(seeded)


# --- kinds, prefixes and subjects ----------------------------------------------------------


async def test_sql_metacharacters_in_kind_round_trip(queue: Queue, store: Store) -> None:
    job = await queue.enqueue(Evil())
    assert await queue.count(kind=EVIL_KIND) == 1
    assert (await queue.stats()).pending_by_kind == {EVIL_KIND: 1}
    assert [j.kind for j in (await queue.history(kind=EVIL_KIND)).jobs] == [EVIL_KIND]
    (claimed,) = await store.claim(ClaimRequest("w/1", {EVIL_KIND: dt.timedelta(seconds=5)}, 1))
    assert claimed.id == job.id and claimed.payload == {"note": Evil().note}


@pytest.mark.parametrize("prefix", [
    "x'; drop table y; --", "venturi;", "Venturi_", "a b", "1abc", "", "a" * 25, "ven\x00",
])
async def test_prefixes_with_metacharacters_refused(pg_dsn: str, prefix: str) -> None:
    with pytest.raises(ConfigError) as info:
        MemoryStore(prefix=prefix)
    assert "invalid prefix" in one_line(info.value)
    with pytest.raises(ConfigError) as info:
        await PostgresStore.connect(pg_dsn, prefix=prefix)
    assert "invalid prefix" in one_line(info.value)
    with pytest.raises(ConfigError):
        async with Queue.connect(pg_dsn, prefix=prefix):
            pass


SUBJECTS = ["file:///a%", "file:///a%/x", "file:///ab", "file:///a_", "file:///a_/y",
            "file:///aZ", "file:///a\\", "file:///a\\/z", "file:///it's", "file:///it\"s",
            "file:///a"]


@pytest.mark.parametrize(("root", "matches"), [
    ("file:///a%", {"file:///a%", "file:///a%/x"}),
    ("file:///a_", {"file:///a_", "file:///a_/y"}),
    ("file:///a\\", {"file:///a\\", "file:///a\\/z"}),
    ("file:///it's", {"file:///it's"}),
    ("file:///it\"s", {"file:///it\"s"}),
    ("file:///a", {"file:///a"}),
])
async def test_subject_metacharacters_are_literal(queue: Queue, root: str,
                                                  matches: set[str]) -> None:
    await queue.enqueue_many([Embed(uri=s) for s in SUBJECTS])
    assert await queue.count(subject=root) == len(matches)
    assert await queue.count(subject=root + "/") == len(matches)
    assert await queue.cancel(subject=root) == len(matches)
    left = {j.subject for j in (await queue.history(limit=100)).jobs}
    assert left == set(SUBJECTS) - matches


# --- delays and leases ------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "match"), [
    ({"delay": dt.timedelta(seconds=-1)}, "outside 0..3650 days"),
    ({"delay": dt.timedelta(days=365 * 100)}, "outside 0..3650 days"),
    ({"delay": 5}, "delay= must be a timedelta, not int"),
    ({"at": dt.datetime(2030, 1, 1)}, "timezone-aware"),
    ({"at": dt.datetime(2200, 1, 1, tzinfo=dt.UTC)}, "more than 3650 days away"),
    ({"delay": dt.timedelta(seconds=1), "at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)},
     "not both"),
    ({"priority": 7}, "out of range"),
    ({"priority": "urgent"}, "not one of high, normal, low"),
])
async def test_absurd_delays_and_priorities(seeded: Queue, kw: dict[str, Any],
                                            match: str) -> None:
    await refused(seeded, Blob(data=1), match, **kw)
    await assert_kept(seeded)


async def test_past_at_runs_now(queue: Queue, clock: venturi.ManualClock) -> None:
    job = await queue.enqueue(Blob(data=1), at=clock.now() - dt.timedelta(days=1))
    row = await queue.job(job.id)
    assert row is not None and row.status is Status.PENDING
    assert row.visible_at == clock.now() - dt.timedelta(days=1)


@pytest.mark.parametrize(("options", "match"), [
    ({"lease": dt.timedelta(0)}, "lease 0:00:00 is outside 0.5s..24h"),
    ({"lease": dt.timedelta(hours=25)}, "is outside 0.5s..24h"),
    ({"lease": dt.timedelta(seconds=-5)}, "is outside 0.5s..24h"),
    ({"timeout": dt.timedelta(0)}, "timeout must be positive"),
    ({"max_failures": 0}, "max_failures must be an int >= 1"),
    ({"priority": 9}, "out of range"),
])
def test_bad_task_options(options: dict[str, Any], match: str) -> None:
    with pytest.raises(TaskDefinitionError) as info:
        class Bad(venturi.Task, kind="test.bad.options", **options):
            async def run(self, ctx: venturi.Context) -> None:
                return None
    message = one_line(info.value)
    assert match in message and "Bad" in message, message


def test_errors_are_venturi_errors() -> None:
    for cls in (InvalidJob, ConfigError, TaskDefinitionError):
        assert issubclass(cls, VenturiError)
