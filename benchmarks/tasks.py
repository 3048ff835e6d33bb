"""The task the benchmarks enqueue: a small, typical payload and no side effects."""

from __future__ import annotations

import venturi

KIND = "bench.noop"


class Noop(venturi.Task, kind=KIND):
    n: int
    uri: str

    async def run(self, ctx: venturi.Context) -> None:
        return None


def payload(n: int) -> dict[str, object]:
    """The payload of job ``n``, as the raw references receive it."""
    return {"n": n, "uri": f"s3://bench/objects/{n:08d}"}


def task(n: int) -> Noop:
    return Noop(n=n, uri=f"s3://bench/objects/{n:08d}")
