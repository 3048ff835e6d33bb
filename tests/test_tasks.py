"""Task definitions (refused at class creation), the registry, and the payload codec."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any, Literal

import orjson
import pytest

import venturi
from tests.tasks import Embed, Tick
from venturi import PayloadDecodeError, Priority, TaskDefinitionError
from venturi.task import lookup, registered


def define(kind: str, annotations: dict[str, Any] | None = None, *, run: Any = None,
           namespace: dict[str, Any] | None = None, **options: Any) -> type[venturi.Task]:
    """Create a Task subclass the way a class statement would."""

    async def default_run(self: Any, ctx: venturi.Context) -> None:
        return None

    body: dict[str, Any] = {"__annotations__": dict(annotations or {}),
                            "__module__": __name__, "__qualname__": f"T_{kind}"}
    body["run"] = default_run if run is None else run
    body.update(namespace or {})
    return type(f"T_{kind}", (venturi.Task,), body, kind=kind, **options)


@pytest.mark.parametrize("field", ["run", "subject", "dedup_key", "merge", "backoff", "kind"])
def test_reserved_field_names_are_refused(field: str) -> None:
    with pytest.raises(TaskDefinitionError, match="reserved"):
        define(f"t.reserved.{field}", {field: str})
    with pytest.raises(venturi.UnknownKind):
        lookup(f"t.reserved.{field}")


@pytest.mark.parametrize("tp", [bytes, set[int], frozenset[str], dict[int, str], Decimal, complex,
                                tuple[int, str], object])
def test_unsupported_field_types_are_refused(tp: Any) -> None:
    kind = f"t.badtype.{getattr(tp, '__name__', 'x')}.{id(tp)}"
    with pytest.raises(TaskDefinitionError):
        define(kind, {"value": tp})
    assert kind not in registered()


def test_duplicate_kind_is_refused() -> None:
    define("t.dup", {"a": int})
    with pytest.raises(TaskDefinitionError, match="already registered"):
        type("Other", (venturi.Task,), {"__module__": __name__, "__qualname__": "Other",
                                        "run": lookup("t.dup").run}, kind="t.dup")
    assert lookup("t.dup").__qualname__ == "T_t.dup"


def test_run_must_be_a_coroutine_function() -> None:
    def sync_run(self: Any, ctx: Any) -> None:
        return None

    with pytest.raises(TaskDefinitionError, match="async def run"):
        define("t.sync-run", run=sync_run)
    with pytest.raises(TaskDefinitionError, match="async def run"):
        type("NoRun", (venturi.Task,), {"__module__": __name__}, kind="t.no-run")


def test_periodic_tasks_take_no_required_fields_or_dedup_key() -> None:
    with pytest.raises(TaskDefinitionError, match="required"):
        define("t.periodic.required", {"uri": str}, every=dt.timedelta(minutes=1))
    with pytest.raises(TaskDefinitionError, match="dedup_key"):
        define("t.periodic.dedup", namespace={"dedup_key": lambda self: "k"},
               every=dt.timedelta(minutes=1))
    assert Tick.__task__.periodic and Tick.__task__.every == dt.timedelta(minutes=5)


@pytest.mark.parametrize("options", [
    {"priority": 5}, {"priority": "urgent"}, {"lease": dt.timedelta(seconds=0.1)},
    {"lease": dt.timedelta(hours=25)}, {"timeout": dt.timedelta(0)}, {"max_failures": 0},
    {"every": dt.timedelta(0)}, {"every": dt.timedelta(minutes=1), "cron": "* * * * *"},
    {"cron": "not a cron"},
])
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(TaskDefinitionError):
        define(f"t.opt.{sorted(options)}.{id(options)}", **options)


def test_a_kind_is_required_and_must_be_printable() -> None:
    with pytest.raises(TaskDefinitionError, match="kind"):
        type("NoKind", (venturi.Task,), {"__module__": __name__})
    for bad in ("", " padded ", "tab\there"):
        with pytest.raises(TaskDefinitionError, match="kind"):
            define(bad)


def test_options_are_recorded() -> None:
    options = Embed.__task__
    assert (options.kind, options.priority, options.max_failures, options.periodic) == (
        "test.embed", Priority.NORMAL, 3, False)
    assert lookup("test.embed") is Embed and Embed.kind == "test.embed"


def test_priority_parses_members_numbers_and_names() -> None:
    assert [Priority.parse(v) for v in (Priority.LOW, 0, "1", "low", "HIGH")] == [
        Priority.LOW, Priority.HIGH, Priority.NORMAL, Priority.LOW, Priority.HIGH]
    for bad in (3, "3", "urgent", -1):
        with pytest.raises(ValueError):
            Priority.parse(bad)


def test_default_backoff_grows_and_is_capped() -> None:
    job = Embed(uri="x")
    assert dt.timedelta(seconds=0.8) <= job.backoff(1) <= dt.timedelta(seconds=1.2)
    assert dt.timedelta(seconds=6.4) <= job.backoff(4) <= dt.timedelta(seconds=9.6)
    assert job.backoff(100) <= dt.timedelta(hours=1.2)


# --- codec ----------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass
class Shape:
    name: str
    points: list[Point]
    anchor: Point | None = None


class Rich(venturi.Task, kind="test.codec.rich"):
    when: dt.datetime
    day: dt.date
    uid: uuid.UUID
    color: Color
    level: Level
    shape: Shape
    maybe: int | None = None
    tags: list[str] = dataclasses.field(default_factory=list)
    meta: dict[str, int] = dataclasses.field(default_factory=dict)
    nested: dict[str, list[Point]] = dataclasses.field(default_factory=dict)
    frozen: tuple[int, ...] = ()
    mode: Literal["fast", "slow"] = "fast"
    either: int | str = 0
    anything: Any = None

    async def run(self, ctx: venturi.Context) -> None:
        return None


def _rich() -> Rich:
    return Rich(
        when=dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC),
        day=dt.date(2024, 2, 29), uid=uuid.uuid4(), color=Color.BLUE, level=Level.HIGH,
        shape=Shape("tri", [Point(0, 0), Point(1.5, 2)], anchor=Point(3, 4)), maybe=7,
        tags=["a", "ü"], meta={"n": 1}, nested={"k": [Point(1, 1)]}, frozen=(1, 2),
        mode="slow", either="s", anything={"free": [1, "form"]},
    )


def test_payload_round_trips_through_json() -> None:
    task = _rich()
    text = task.to_json()
    assert Rich.from_payload(orjson.loads(text)) == task
    default = Rich(when=task.when, day=task.day, uid=task.uid, color=Color.RED,
                   level=Level.LOW, shape=Shape("s", []))
    assert Rich.from_payload(orjson.loads(default.to_json())) == default


async def test_payload_round_trips_through_the_store(queue: venturi.Queue) -> None:
    task = _rich()
    row = await queue.job((await queue.enqueue(task)).id)
    assert row is not None and Rich.from_payload(row.payload) == task


def _payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = orjson.loads(_rich().to_json())
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not _DROP}


_DROP = object()


@pytest.mark.parametrize(("payload", "classification"), [
    (_payload(extra=1), "payload-unknown-field"),
    (_payload(when=_DROP), "payload-missing-field"),
    (_payload(when="yesterday"), "payload-type-mismatch"),
    (_payload(uid="not-a-uuid"), "payload-type-mismatch"),
    (_payload(color="green"), "payload-type-mismatch"),
    (_payload(maybe="7"), "payload-type-mismatch"),
    (_payload(maybe=True), "payload-type-mismatch"),  # bool is not an int here
    (_payload(tags=["a", 1]), "payload-type-mismatch"),
    (_payload(meta=[1]), "payload-type-mismatch"),
    (_payload(mode="medium"), "payload-type-mismatch"),
    (_payload(shape={"name": "s", "points": [{"x": "no"}]}), "payload-type-mismatch"),
    (_payload(shape={"name": "s", "points": [], "color": 1}), "payload-unknown-field"),
    (_payload(shape={"points": []}), "payload-missing-field"),
    ([1, 2], "payload-not-an-object"),
    ("text", "payload-not-an-object"),
])
def test_decode_errors_are_classified(payload: Any, classification: str) -> None:
    with pytest.raises(PayloadDecodeError) as info:
        Rich.from_payload(payload)
    assert info.value.classification == classification


def test_classifications_hold_no_payload_content() -> None:
    with pytest.raises(PayloadDecodeError) as info:
        Embed.from_payload({"uri": 12345678})
    assert "12345678" not in str(info.value)


def test_unencodable_payloads_are_invalid_jobs() -> None:
    for bad in (Embed(uri="a\x00b"), Embed(uri="\udc00"), Embed(uri=object())):  # type: ignore[arg-type]
        with pytest.raises(venturi.InvalidJob):
            bad.to_json()
    assert Embed(uri="a\\u0000b").to_json()  # an escaped backslash is not a NUL
