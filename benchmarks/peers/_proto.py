"""What the peers' child processes share (run with a peer's venv: no venturi here).

One line at a time on stdin/stdout, as :mod:`benchmarks.workerproc` talks to its parent:
the child connects and prints ``ready``; then, until ``exit``:

- ``fill N``: empty the peer's tables, insert N no-op jobs with the peer's own batch
  insert (untimed), print ``filled``;
- ``go``: start the peer's consumer and print ``done {json}`` when the last job is done
  (``seconds`` from "go" to the last job recorded as done in the database, ``jobs`` run);
- ``enqueue N``: empty the tables, enqueue N jobs one call each, print ``done {json}``;
- ``listen``: start the consumer, idle, and print ``listening``; from then on it prints
  ``started N T`` as the job of payload N starts (T its ``perf_counter``: one clock for
  every process of the host), until ``exit`` stops it;
- ``commit N``: enqueue the job of payload N, print ``committed N T`` (T taken when the
  enqueue call returned).

The payload is the one venturi's benchmark jobs carry (``benchmarks.tasks.payload``),
and every handler decodes it, as a handler must.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


def payload(n: int) -> dict[str, object]:
    return {"n": n, "uri": f"s3://bench/objects/{n:08d}"}


async def line() -> str:
    text: str = await asyncio.to_thread(sys.stdin.readline)
    return text.strip()


def started(n: int) -> None:
    print(f"started {n} {time.perf_counter()!r}", flush=True)


def say(text: str, result: dict[str, Any] | None = None) -> None:
    print(text if result is None else f"{text} {json.dumps(result)}", flush=True)
