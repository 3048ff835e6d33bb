"""Where a pickup's time goes, stage by stage, venturi beside the raw LISTEN + claim loop.

``python -m benchmarks.pickuptrace [--n 1000] [--dsn DSN]``: the pickup scenario's
protocol (benchmarks/scenarios/worker.py, ``pickup``: one job at a time, about 50 a
second, venturi's and raw jobs alternating, each enqueued only once the previous one
started) with an idle in-process worker (concurrency 10, defaults), timing each stage of
every pickup on one clock (``perf_counter``):

- **commit → notified**: the producer's call returned → the LISTEN connection's
  callback ran for the wake-up (asyncpg's listener callback; negative when the
  notification is read before the producer's reply);
- **notified → claim sent**: the hand-offs to the claimer and what it does before its
  statement (venturi: the wake-up's handling, the claimer's event, the prefetch window,
  the flow split; before this branch also the waker's task and, a few times in a
  thousand, the re-read of the kinds' rows);
- **claim round trip**: the claim statement sent → its rows back;
- **claim back → started**: the hand-off to a slot and the handler's start (payload
  decoded, context built).

Each stage is reported at p50, p90 and p99, and over the slowest 1 % of pickups (the
p99's own samples), the mean of each stage: what the tail is made of. Also counted, on
each side: claim statements per pickup (the pickup's own and those that find nothing:
venturi's when a slot frees or a settlement commits, the raw loop's claim until empty),
and the pickups whose notification found a claim already in flight (sent before it):
such a pickup waits for that claim to come back before its own goes out, unless that
claim saw the new job and took it, in which case the pickup has no claim, and no
stages, of its own (counted, and left out of the stage table). ``rereads``
counts the re-reads of the kinds' rows begun between a notification and its claim (the
claim waited for them where the claimer did the re-read). Instrumentation: wrappers on
the listener's callback, the store's claim and the raw loop's connection; what they add
(two ``perf_counter`` calls per stage) is the same on both sides. Works on any checkout
of venturi (it wraps only names every version has), so that two can be compared.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import orjson

from venturi import Queue
from venturi._ids import uuid7_many
from venturi.store.postgres import asyncpg_sessions

from .harness import DEFAULT_DSN, fresh_prefix
from .raw import INSERT_NOTIFY, RawConsumer
from .scenarios.worker import probe_in_process, quiet_logs
from .tasks import KIND, Probe, Starts, payload

STAGES = ("commit → notified", "notified → claim sent", "claim round trip",
          "claim back → started", "total")


class Marks:
    """The timestamps of the pickup in flight: each stage's first mark after the commit."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.rereads = 0
        self.claims = 0  # claim statements sent, all of them
        self.outstanding = 0  # claims sent and not back yet
        self.in_flight = 0  # pickups whose notification found a claim in flight

    def mark(self, what: str) -> None:
        self.current.setdefault(what, time.perf_counter())

    def notified(self) -> None:
        if "notified" not in self.current and self.outstanding:
            self.in_flight += 1
        self.mark("notified")

    async def claim(self, call: Awaitable[Any]) -> Any:
        """Time ``call``, a claim: the first one sent after the commit is the pickup's
        (its send and its rows back), any other only counted."""
        self.claims += 1
        pickup, own = self.current, "sent" not in self.current
        self.mark("sent")
        self.outstanding += 1
        try:
            return await call
        finally:
            self.outstanding -= 1
            if own and pickup is self.current:
                self.mark("back")

    def begin(self) -> None:
        self.current = {}

    def stages(self, committed: float, started: float) -> list[float] | None:
        """The pickup's stages (ms); None when a claim sent before the commit took the
        job (no claim of its own)."""
        c = self.current
        if "sent" not in c or "back" not in c or "notified" not in c:
            return None
        return [(c["notified"] - committed) * 1000, (c["sent"] - c["notified"]) * 1000,
                (c["back"] - c["sent"]) * 1000, (started - c["back"]) * 1000,
                (started - committed) * 1000]


def trace_venturi(queue: Queue, marks: Marks) -> Callable[[], None]:
    """Wrap the LISTEN callback (for every listener opened from now on), the store's
    claim and its re-read of the kinds' rows; returns the undo."""
    store: Any = queue.store
    real_callback = asyncpg_sessions.AsyncpgListener._callback
    real_claim, real_controls = store.claim, store.kind_controls

    def callback(self: Any, label: str) -> Any:
        inner = real_callback(self, label)

        def on_notify(*args: Any) -> None:
            if label == "jobs":
                marks.notified()
            inner(*args)
        return on_notify

    async def claim(*args: Any, **kwargs: Any) -> Any:
        return await marks.claim(real_claim(*args, **kwargs))

    async def kind_controls(*args: Any, **kwargs: Any) -> Any:
        if "notified" in marks.current and "sent" not in marks.current:
            marks.rereads += 1
        return await real_controls(*args, **kwargs)

    asyncpg_sessions.AsyncpgListener._callback = callback  # type: ignore[method-assign]
    store.claim, store.kind_controls = claim, kind_controls

    def undo() -> None:
        asyncpg_sessions.AsyncpgListener._callback = real_callback  # type: ignore[method-assign]
        del store.claim, store.kind_controls
    return undo


class _TracedConn:
    """The raw loop's claim connection, its ``fetch`` (the claim) timed."""

    def __init__(self, conn: Any, marks: Marks) -> None:
        self._conn, self._marks = conn, marks

    async def fetch(self, *args: Any) -> Any:
        return await self._marks.claim(self._conn.fetch(*args))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def trace_raw(raw: RawConsumer, marks: Marks) -> None:
    """The scenario's own raw consumer, its wake-up (the LISTEN callback sets its event)
    and its claim timed."""
    wake = raw._wake.set

    def on_notify() -> None:
        marks.notified()
        wake()
    raw._wake.set = on_notify  # type: ignore[method-assign]
    raw._conn = _TracedConn(raw._conn, marks)  # type: ignore[assignment]


async def trace(dsn: str, n: int, rate: float = 50.0) -> dict[str, Any]:
    v_marks, r_marks = Marks(), Marks()
    rows: dict[str, list[list[float]]] = {"venturi": [], "raw": []}
    async with (
        fresh_prefix(dsn) as vp,
        fresh_prefix(dsn) as rp,
        Queue.connect(dsn, prefix=vp) as queue,
    ):
        undo = trace_venturi(queue, v_marks)
        conn = await asyncpg.connect(dsn)
        insert = INSERT_NOTIFY.format(p=rp)
        try:
            with quiet_logs():
                raw_started = Starts()
                async with (probe_in_process(queue) as started,
                            RawConsumer(dsn, rp, lambda p: raw_started.__setitem__(
                                p["n"], time.perf_counter())) as raw):
                    trace_raw(raw, r_marks)
                    tick = time.perf_counter()
                    for i in range(2 * n):
                        tick += 1 / (2 * rate)
                        await asyncio.sleep(max(tick - time.perf_counter(), 0))
                        k = i // 2
                        if (i + k) % 2:
                            v_marks.begin()
                            await queue.enqueue(Probe(n=k, uri=f"s3://bench/objects/{k:08d}"))
                            committed = time.perf_counter()
                            await started.wait(k, 10, "a venturi pickup")
                            if (row := v_marks.stages(committed, started[k])) is not None:
                                rows["venturi"].append(row)
                        else:
                            r_marks.begin()
                            await conn.fetchval(insert, uuid7_many(1)[0], KIND,
                                                orjson.dumps(payload(k)).decode())
                            committed = time.perf_counter()
                            await raw_started.wait(k, 10, "a raw pickup")
                            if (row := r_marks.stages(committed, raw_started[k])) is not None:
                                rows["raw"].append(row)
        finally:
            undo()
            await conn.close()
    return {"rows": rows, "rereads": v_marks.rereads, "n": n,
            "claims": {"venturi": v_marks.claims, "raw": r_marks.claims},
            "in_flight": {"venturi": v_marks.in_flight, "raw": r_marks.in_flight}}


def _pct(values: list[float], p: float) -> float:
    """Nearest rank, as ``harness.Figure.percentile``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def report(result: dict[str, Any]) -> str:
    """A Markdown table: each stage's p50 / p90 / p99 and its mean over the slowest 1 %."""
    lines = ["| stage | venturi p50 / p90 / p99 ms | raw p50 / p90 / p99 ms "
             "| slowest 1 %: venturi / raw mean ms |", "|---|---:|---:|---:|"]
    tails: dict[str, list[list[float]]] = {}
    for who, rows in result["rows"].items():
        count = max(1, len(rows) // 100)
        tails[who] = sorted(rows, key=lambda r: r[-1])[-count:]
    for i, stage in enumerate(STAGES):
        cells = []
        for who in ("venturi", "raw"):
            col = [r[i] for r in result["rows"][who]]
            cells.append(" / ".join(f"{_pct(col, p):.2f}" for p in (50, 90, 99)))
        tail = " / ".join(f"{statistics.fmean(r[i] for r in tails[w]):.2f}"
                          for w in ("venturi", "raw"))
        lines.append(f"| {stage} | {cells[0]} | {cells[1]} | {tail} |")
    lines.append("")
    n, claims, in_flight = result["n"], result["claims"], result["in_flight"]
    lines.append(f"{n} pickups each; claim statements per pickup: venturi "
                 f"{claims['venturi'] / n:.2f}, raw {claims['raw'] / n:.2f}; pickups whose "
                 f"notification found a claim in flight: venturi {in_flight['venturi']}, raw "
                 f"{in_flight['raw']}; taken by a claim sent before the commit (no stages, "
                 f"left out above): venturi {n - len(result['rows']['venturi'])}, raw "
                 f"{n - len(result['rows']['raw'])}")
    lines.append("")
    lines.append("Re-reads of the kinds' rows "
                 f"begun between a notification and its claim: {result['rereads']} (on the "
                 "claim's path where the claimer re-reads them, beside it where it does not)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="pickups per contender")
    parser.add_argument("--dsn", default=os.environ.get("VENTURI_DSN", DEFAULT_DSN))
    args = parser.parse_args()
    print(report(asyncio.run(trace(args.dsn, args.n))))


if __name__ == "__main__":
    main()
