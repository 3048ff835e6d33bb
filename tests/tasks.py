"""Task classes shared by the tests (kinds are registered once per process)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import venturi


class Embed(venturi.Task, kind="test.embed", max_failures=3):
    uri: str
    model: str = "small"

    def subject(self) -> str | None:
        return self.uri

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Summarize(venturi.Task, kind="test.summarize", priority=venturi.Priority.LOW):
    uri: str
    words: int = 100

    def subject(self) -> str | None:
        return self.uri

    async def run(self, ctx: venturi.Context) -> str:
        return "summarized"


class Urgent(venturi.Task, kind="test.urgent", priority=venturi.Priority.HIGH):
    n: int = 0

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Refresh(venturi.Task, kind="test.refresh"):
    """Dedup on uri; the merge policy is chosen by the ``policy`` field."""

    uri: str
    policy: str = "keep"
    version: int = 0

    def dedup_key(self) -> str | None:
        return self.uri

    def merge(self, pending: Refresh, carry: Any) -> venturi.Merge:
        if self.policy == "replace":
            return venturi.Replace()
        if self.policy == "with":
            return venturi.With(
                dataclasses.replace(self, version=pending.version + self.version),
                carry={"merged_from": pending.version},
            )
        return venturi.Keep()

    async def run(self, ctx: venturi.Context) -> None:
        return None


class Tick(venturi.Task, kind="test.tick", every=timedelta(minutes=5)):
    label: str = "tick"

    async def run(self, ctx: venturi.Context) -> None:
        return None
