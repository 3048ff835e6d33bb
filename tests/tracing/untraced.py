"""A producer and a worker in one process that sets no tracer provider.

    python -m tests.tracing.untraced DSN PREFIX {hidden|absent|api}

``hidden``: OpenTelemetry cannot be imported at all, as without the extra;
``absent``: installed, but nothing imports it (and venturi must not either);
``api``: the API is imported, no provider is set. Enqueues one job, a batch and a
dedup batch, drains them with a worker, and prints one JSON line: what each run saw
as ``ctx.span``, the stored trace contexts, and whether OpenTelemetry got imported.
"""

from __future__ import annotations

import asyncio
import json
import sys

MODE = sys.argv[3]
if MODE == "hidden":
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # import fails
elif MODE == "api":
    import opentelemetry.trace  # noqa: F401

import venturi  # noqa: E402

SEEN: list[object] = []


class Plain(venturi.Task, kind="untraced.plain"):
    async def run(self, ctx: venturi.Context) -> None:
        SEEN.append(ctx.span)


class Keyed(venturi.Task, kind="untraced.keyed"):
    def dedup_key(self) -> str | None:
        return "k"

    async def run(self, ctx: venturi.Context) -> None:
        SEEN.append(ctx.span)


async def main(dsn: str, prefix: str) -> None:
    async with venturi.Queue.connect(dsn, prefix=prefix) as queue:
        await queue.migrate()
        ids = [(await queue.enqueue(Plain())).id, (await queue.enqueue(Keyed())).id]
        ids += await queue.enqueue_many([Plain(), Plain()])
        ids += await queue.enqueue_many([Keyed(), ("untraced.plain", {})])
        await venturi.Worker(queue, tasks=[Plain, Keyed], concurrency=2).run(until_empty=True)
        rows = [await queue.job(i) for i in ids]
    print(json.dumps({
        "spans": [repr(s) for s in SEEN],
        "contexts": [None if r is None else r.trace_context for r in rows],
        "imported": sys.modules.get("opentelemetry") is not None,
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
