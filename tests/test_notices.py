"""The channel formats: built and parsed by venturi.notices, and what both stores
actually send parses back to what was meant."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import orjson
import pytest

from tests.helpers import add, claim_one, new_job
from venturi import ManualClock, Queue
from venturi.notices import (
    CANCEL_CHUNK,
    Cancel,
    Drain,
    InvalidNotice,
    JobNotice,
    cancel_messages,
    drain_message,
    encode,
    job_notice,
    parse_control,
    parse_job_notice,
)
from venturi.store.base import Store

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def test_job_notice_round_trip() -> None:
    assert parse_job_notice(job_notice("embed", NOW, NOW)) == JobNotice("embed")
    later = NOW + dt.timedelta(seconds=90, microseconds=250_000)
    assert parse_job_notice(job_notice("embed", later, NOW)) == JobNotice("embed", later)


@pytest.mark.parametrize("payload", ["embed|", "embed|soon", "embed|1e400", "embed|nan"])
def test_a_malformed_due_time_reads_as_runnable_now(payload: str) -> None:
    assert parse_job_notice(payload) == JobNotice("embed")


def test_control_round_trip() -> None:
    ids = [uuid.uuid4() for _ in range(CANCEL_CHUNK * 2 + 1)]
    messages = cancel_messages(ids)
    assert [len(m["ids"]) for m in messages] == [CANCEL_CHUNK, CANCEL_CHUNK, 1]
    parsed = [parse_control(encode(m)) for m in messages]
    assert [i for p in parsed if isinstance(p, Cancel) for i in p.ids] == ids
    assert parse_control(encode(drain_message("w1", 2.5))) == Drain("w1", 2.5)
    assert parse_control(encode(drain_message())) == Drain(None, None)


@pytest.mark.parametrize("payload", [
    "not json", "[1]", '{"op": "cancel", "ids": 5}', '{"op": "drain", "grace": "soon"}',
    '{"op": "drain", "grace": -1}', '{"op": "drain", "grace": true}',
    '{"op": "drain", "worker": 7}',
])
def test_malformed_control_messages_are_refused(payload: str) -> None:
    with pytest.raises(InvalidNotice):
        parse_control(payload)


def test_unknown_ops_and_bad_ids_are_not_errors() -> None:
    assert parse_control('{"op": "from-a-newer-version"}') is None
    good = uuid.uuid4()
    assert parse_control(encode({"op": "cancel", "ids": ["x", 3, str(good)]})) == Cancel((good,))


def test_drain_message_refuses_a_bad_grace() -> None:
    with pytest.raises(InvalidNotice):
        drain_message(None, float("inf"))


async def _notices(listener: object, channel: str, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        got, payload = await asyncio.wait_for(listener.receive(), timeout=10)  # type: ignore[attr-defined]
        if got == channel:
            out.append(payload)
    return out


async def test_what_the_stores_send_parses(store: Store, clock: ManualClock) -> None:
    """Both stores' wake-ups (built in SQL for PostgreSQL) and cancel notices parse
    back to the kind, the due time and the ids that were meant."""
    async with store.listen() as listener:
        await add(store, new_job("now"))
        await add(store, new_job("later", delay=30))
        got = [parse_job_notice(p) for p in await _notices(listener, "jobs", 2)]
        assert got[0] == JobNotice("now")
        assert got[1].kind == "later" and got[1].due is not None
        expected = clock.now() + dt.timedelta(seconds=30)
        assert abs((got[1].due - expected).total_seconds()) < 0.001

        claimed = await claim_one(store, "now")
        assert await Queue(store).cancel(ids=[claimed.id]) == 1
        (payload,) = await _notices(listener, "control", 1)
        assert parse_control(payload) == Cancel((claimed.id,))
        assert orjson.loads(payload)["op"] == "cancel"
