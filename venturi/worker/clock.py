"""The database's clock, read without a query.

Time is the database's, never a worker's wall clock (docs/concepts/lifecycle.md): a
worker whose clock is off still arms its timer for the moment the database makes a job
visible. The offset between the two is measured at boot and again with every heartbeat.
"""

from __future__ import annotations

import datetime as dt

from ..store.base import Store


class DbClock:
    __slots__ = ("offset",)

    def __init__(self) -> None:
        self.offset = 0.0  # seconds to add to local UTC for the database's time

    async def sync(self, store: Store) -> None:
        """Measure the offset again (one query). The database read its clock somewhere
        during the round trip: taken as its middle, not its end (which put the estimate
        half a round trip behind)."""
        sent = dt.datetime.now(dt.UTC)
        now = await store.db_now()
        back = dt.datetime.now(dt.UTC)
        self.offset = (now - (sent + (back - sent) / 2)).total_seconds()

    def now(self) -> dt.datetime:
        """The database's time now, as far as the last measurement tells."""
        return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.offset)

    def to_local(self, when: dt.datetime) -> dt.datetime:
        """A database time as local UTC."""
        return when - dt.timedelta(seconds=self.offset)
