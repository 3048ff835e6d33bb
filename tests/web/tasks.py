"""Tasks the dashboard tests run through a real in-process worker."""

from __future__ import annotations

import asyncio
import datetime as dt

import venturi

GATE = asyncio.Event()  # held by Gated runs until a test sets it


def new_gate() -> asyncio.Event:
    """A closed gate for this test's event loop (an Event binds to the first loop it meets)."""
    global GATE
    GATE = asyncio.Event()
    return GATE


class Embed(venturi.Task, kind="web.embed"):
    uri: str = ""

    def subject(self) -> str | None:
        return self.uri or None

    async def run(self, ctx: venturi.Context) -> None:
        ctx.attach(chunks=3)


class Doomed(venturi.Task, kind="web.doomed", max_failures=1):
    """Dies on its first run with the reason it was given (a classification)."""

    reason: str = "unsupported-format"

    async def run(self, ctx: venturi.Context) -> None:
        raise venturi.GiveUp(self.reason)


class Resumable(venturi.Task, kind="web.resumable"):
    """Pauses once with a carry, then completes keeping it."""

    async def run(self, ctx: venturi.Context) -> venturi.Pause | None:
        if ctx.carry is None:
            return venturi.Pause(dt.timedelta(0), carry={"page": 2})
        ctx.attach(resumed_from=ctx.carry["page"])
        ctx.set_result({"pages": ctx.carry["page"], "html": "<b>two</b>"})
        return None


class Gated(venturi.Task, kind="web.gated"):
    async def run(self, ctx: venturi.Context) -> None:
        await GATE.wait()


class Hourly(venturi.Task, kind="web.hourly", every=dt.timedelta(hours=1)):
    async def run(self, ctx: venturi.Context) -> None:
        return None


XSS = '<script>alert("x")</script>"><img src=x onerror=alert(1)>'


HOSTILE_KIND = 'web.</script><script>alert("k")</script><img src=x onerror=alert(2)>'


class Hostile(venturi.Task, kind=HOSTILE_KIND):
    """Markup everywhere a value reaches a page: kind, payload, subject, carry,
    attachment and the reason it dies with."""

    html: str = XSS

    def subject(self) -> str | None:
        return "file:///" + XSS

    async def run(self, ctx: venturi.Context) -> venturi.Pause | None:
        if ctx.carry is None:
            return venturi.Pause(dt.timedelta(0), carry={"note": XSS})
        ctx.attach(html=XSS)
        raise venturi.GiveUp(XSS)
