"""Tasks for the tracing tests, run in the test process and in worker processes."""

from __future__ import annotations

import datetime as dt

import anyio
from opentelemetry import trace

import venturi


class Ok(venturi.Task, kind="trace.ok"):
    """Completes; traces a step of its own under its run's span."""

    async def run(self, ctx: venturi.Context) -> None:
        current = trace.get_current_span()
        with trace.get_tracer("tests.tracing").start_as_current_span("step") as step:
            step.set_attribute("test.ctx_span_is_current", ctx.span is current)


class Flaky(venturi.Task, kind="trace.flaky"):
    """Fails its first run, completes its second, retried at once."""

    async def run(self, ctx: venturi.Context) -> None:
        if ctx.run_no == 1:
            raise ValueError("first run fails")

    def backoff(self, failures: int) -> dt.timedelta:
        return dt.timedelta(0)


class Doomed(venturi.Task, kind="trace.doomed", max_failures=1):
    async def run(self, ctx: venturi.Context) -> None:
        raise RuntimeError("no second chance")


class Stuck(venturi.Task, kind="trace.stuck"):
    """Runs until it is cancelled."""

    async def run(self, ctx: venturi.Context) -> None:
        await anyio.sleep_forever()


class Keyed(venturi.Task, kind="trace.keyed"):
    key: str = "k"

    def dedup_key(self) -> str | None:
        return self.key

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Tick(venturi.Task, kind="trace.tick", every=dt.timedelta(seconds=1)):
    async def run(self, ctx: venturi.Context) -> None:
        return None


WORKER_TASKS: list[type[venturi.Task]] = [Ok, Flaky, Doomed, Stuck]
