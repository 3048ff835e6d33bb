"""Queue's operator actions: drain workers, pause and limit kinds (docs/concepts/flow-control.md),
cancel, redrive and clean up jobs (a mixin of :class:`~venturi.Queue`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from .errors import ConfigError
from .newjob import parse_uuid
from .notices import InvalidNotice, drain_message
from .queue_views import normalize_subject, parse_status
from .store.base import CleanupCriteria, KindChange, KindState, Rate, Status, Store
from .store.flow import check_concurrency

_KEEP: Any = object()  # set_limits: leave this limit as it is


class QueueAdmin:
    """The administering part of Queue (a mixin: the queue holds the store)."""

    store: Store

    async def drain(
        self, worker: str | None = None, *, grace: dt.timedelta | float | None = None
    ) -> None:
        """Ask worker ``worker`` (every worker of this queue when None) to drain: stop
        claiming, let running jobs finish within ``grace`` (each worker's own when
        None), release the rest and exit. Returns once the request is sent; watch
        :meth:`workers` to see them go."""
        seconds = grace.total_seconds() if isinstance(grace, dt.timedelta) else grace
        try:
            message = drain_message(worker, seconds)
        except InvalidNotice as exc:
            raise ValueError(str(exc)) from None
        await self.store.notify_control(message)

    # --- flow control (docs/concepts/flow-control.md) --------------------------------------

    async def pause(self, kind: str) -> None:
        """Claim no more jobs of ``kind`` on any worker (within about a second; running
        ones finish); its jobs stay pending and enqueues still work."""
        await self.store.control_kind(KindChange(_kind(kind), paused=True))

    async def resume(self, kind: str) -> None:
        """Undo :meth:`pause`."""
        await self.store.control_kind(KindChange(_kind(kind), paused=False))

    async def set_limits(self, kind: str, *, concurrency: int | object | None = _KEEP,
                         rate: str | Rate | object | None = _KEEP) -> None:
        """Set the operator's limits of ``kind``, overriding its task class's until
        cleared with None; a limit not given is left as it is."""
        if concurrency is _KEEP and rate is _KEEP:
            raise ValueError("set_limits() needs concurrency= and/or rate=")
        try:
            conc = None if concurrency in (None, _KEEP) else check_concurrency(concurrency)
            per = None if rate in (None, _KEEP) else Rate.parse(rate)  # type: ignore[arg-type]
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        await self.store.control_kind(KindChange(
            _kind(kind), set_concurrency=concurrency is not _KEEP, concurrency=conc,
            set_rate=rate is not _KEEP, rate=per))

    async def kinds(self) -> list[KindState]:
        """Every kind a worker declared (as it started) or an operator controlled, or
        with pending or claimed jobs (so a kind no worker serves shows with its
        backlog): paused, the limits in force and where each comes from,
        pending and claimed counts, and what holds it back (``KindState.held``)."""
        return await self.store.kind_states()

    # --- administer ------------------------------------------------------------------------

    async def cancel(
        self,
        *,
        ids: Sequence[UUID | str] | None = None,
        subject: str | None = None,
        workflow: UUID | str | None = None,
        conn: Any = None,
    ) -> int:
        """Delete jobs by id, every job in ``subject``'s subtree, or the unfinished steps
        of ``workflow``. Running ones are cancelled by their workers; side effects are
        not undone (docs/concepts/leases.md#cancellation)."""
        given = sum(x is not None for x in (ids, subject, workflow))
        if given == 0:
            raise ValueError("cancel() needs ids=, subject= or workflow=")
        if given > 1:
            raise ValueError("cancel() takes one of ids=, subject= or workflow=")
        if workflow is not None:
            found = await self.store.workflow(parse_uuid(workflow, what="workflow id"), conn=conn)
            if found is None:
                return 0
            return await self.store.cancel(ids=[step for _, step in found.steps], conn=conn,
                                           unfinished=True)
        if ids is not None:
            return await self.store.cancel(ids=[parse_uuid(i) for i in ids], conn=conn)
        return await self.store.cancel(subject=normalize_subject(subject or ""), conn=conn)

    async def retry(
        self,
        *,
        ids: Sequence[UUID | str] | None = None,
        kind: str | None = None,
        status: Status | str = Status.DEAD,
    ) -> int:
        """Redrive dead jobs: back to pending, fresh failure budget, journal ``redriven``."""
        if parse_status(status) is not Status.DEAD:
            raise ValueError("only dead jobs can be retried (status='dead')")
        if ids is None and kind is None:
            raise ValueError("retry() needs ids= or kind=")
        if ids is not None:
            return await self.store.retry(ids=[parse_uuid(i) for i in ids])
        return await self.store.retry(kind=kind)

    async def cleanup(
        self,
        *,
        finished_before: dt.datetime,
        kind: str | None = None,
        status: Status | str | None = None,
    ) -> int:
        """Delete finished jobs (and their journals) older than ``finished_before``."""
        st = None if status is None else parse_status(status)
        if st is not None and not st.terminal:
            raise ValueError("cleanup only removes finished jobs: status must be completed or dead")
        if finished_before.tzinfo is None:
            raise ValueError("finished_before must be timezone-aware")
        return await self.store.cleanup(CleanupCriteria(finished_before, kind, st))


def _kind(kind: str) -> str:
    if not isinstance(kind, str) or not kind or kind != kind.strip():
        raise ValueError(f"kind {kind!r} must be a non-empty string without surrounding spaces")
    return kind
