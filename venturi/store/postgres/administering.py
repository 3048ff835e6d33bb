"""Administering: cancel, redrive, cleanup and retention; the workers table; control.

Cancel deletes rows and tells the owners of claimed ones in the same
transaction (docs/concepts/leases.md, cancellation); redrive follows
venturi.store.lifecycle (``REDRIVE``), mirrored by ``admin.sql``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from ...notices import CANCEL_CHUNK
from ..base import CleanupCriteria, WorkerInfo
from ..lifecycle import REDRIVE_NOTE
from . import rows
from .operations import Operations


def _statuses(criteria: CleanupCriteria) -> list[str]:
    return [criteria.status.value] if criteria.status else ["completed", "dead"]


class Administering(Operations):
    async def cancel(
        self, *, ids: Sequence[UUID] | None = None, subject: str | None = None, conn: Any = None,
        unfinished: bool = False,
    ) -> int:
        on = self._on(conn)
        if ids is not None:
            name = "cancel_unfinished_ids" if unfinished else "cancel_ids"
            n = await self._val_again(name, list(ids), CANCEL_CHUNK, self.clock.now(), on=on)
        else:
            n = await self._val_again("cancel_subject", subject, CANCEL_CHUNK, self.clock.now(),
                                      on=on)
        return int(n)

    async def retry(self, *, ids: Sequence[UUID] | None = None, kind: str | None = None) -> int:
        if ids is not None:
            n = await self._val_again("retry_ids", REDRIVE_NOTE, list(ids))
        else:
            n = await self._val_again("retry_kind", REDRIVE_NOTE, kind)
        return int(n)

    async def cleanup(self, criteria: CleanupCriteria) -> int:
        total = 0
        while True:
            n = int(await self._val_again("cleanup_batch", criteria.finished_before,
                                    _statuses(criteria), criteria.kind, criteria.batch_size))
            total += n
            if n < criteria.batch_size:
                return total

    async def cleanup_exclusive(self, criteria: CleanupCriteria) -> int | None:
        row = await self._row("cleanup_exclusive", criteria.finished_before, _statuses(criteria),
                              criteria.kind, criteria.batch_size, self.prefix)
        assert row is not None  # one row, always
        return int(row[0]) if row[1] else None

    async def heartbeat(self, info: WorkerInfo) -> None:
        await self._execute(
            "heartbeat", info.name, info.boot_id, info.host, info.pid, list(info.kinds),
            info.concurrency, info.in_flight, info.draining, info.started_at,
        )

    async def forget_worker(self, name: str, boot_id: str) -> None:
        await self._execute("forget_worker", name, boot_id)

    async def workers(self) -> list[WorkerInfo]:
        return [rows.worker(r) for r in await self._fetch("workers")]

    async def notify_control(self, message: Mapping[str, Any]) -> None:
        await self._execute("notify_control", rows.encode(message))
