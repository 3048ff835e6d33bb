"""The task classes the conformance suite enqueues through a Queue.

Their kinds sit under ``conformance.``, so importing the suite next to a
project's own tasks registers no kind of theirs twice.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from ..task import Context, Keep, Merge, Priority, Replace, Task, With


class Embed(Task, kind="conformance.embed", max_failures=3):
    uri: str
    model: str = "small"

    def subject(self) -> str | None:
        return self.uri

    async def run(self, ctx: Context) -> None:
        return None


class Summarize(Task, kind="conformance.summarize", priority=Priority.LOW):
    uri: str
    words: int = 100

    def subject(self) -> str | None:
        return self.uri

    async def run(self, ctx: Context) -> str:
        return "summarized"


class Urgent(Task, kind="conformance.urgent", priority=Priority.HIGH):
    n: int = 0

    async def run(self, ctx: Context) -> None:
        return None


class Refresh(Task, kind="conformance.refresh"):
    """Dedup on uri; the merge policy is chosen by the ``policy`` field."""

    uri: str
    policy: str = "keep"
    version: int = 0

    def dedup_key(self) -> str | None:
        return self.uri

    def merge(self, pending: Refresh, carry: Any) -> Merge:
        if self.policy == "replace":
            return Replace()
        if self.policy == "with":
            return With(
                dataclasses.replace(self, version=pending.version + self.version),
                carry={"merged_from": pending.version},
            )
        return Keep()

    async def run(self, ctx: Context) -> None:
        return None


class Tick(Task, kind="conformance.tick", every=timedelta(minutes=5)):
    label: str = "tick"

    async def run(self, ctx: Context) -> None:
        return None
