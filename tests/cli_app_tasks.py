"""Tasks for the CLI tests, imported with ``--app tests.cli_app_tasks`` (unique kinds)."""

from __future__ import annotations

import venturi


class Echo(venturi.Task, kind="cli.echo", max_failures=2):
    uri: str
    words: int = 1

    def subject(self) -> str | None:
        return self.uri

    async def run(self, ctx: venturi.Context) -> str:
        ctx.attach(words=self.words)
        return f"echoed {self.uri}"


class Reject(venturi.Task, kind="cli.reject", priority=venturi.Priority.LOW):
    reason: str = "unsupported-format"

    async def run(self, ctx: venturi.Context) -> None:
        raise venturi.GiveUp(self.reason)


class Refresh(venturi.Task, kind="cli.refresh"):
    """Coalesces while pending: a second enqueue for the same uri merges."""

    uri: str

    def dedup_key(self) -> str | None:
        return self.uri

    async def run(self, ctx: venturi.Context) -> None:
        return None
