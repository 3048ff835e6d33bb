"""Rule 12: when the next occurrence of a periodic task is due."""

from __future__ import annotations

import datetime as dt

from ..task import TaskOptions

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def next_tick(options: TaskOptions, now: dt.datetime) -> dt.datetime:
    """The first tick strictly after ``now`` (UTC); missed ticks are skipped."""
    now = now.astimezone(dt.UTC)
    if options.every is not None:
        period = options.every
        elapsed = now - _EPOCH
        ticks = elapsed // period + 1
        return _EPOCH + ticks * period
    if options.cron is not None:
        from croniter import croniter

        result: dt.datetime = croniter(options.cron, now).get_next(dt.datetime)
        return result.astimezone(dt.UTC)
    raise ValueError(f"task {options.kind!r} is not periodic")
