"""Producing: inserting jobs (one, a batch, a COPY), dedup and merge, periodic seeds.

Every insert sends its wake-up in the same statement or transaction, so the
NOTIFY is delivered when the insert commits (docs/concepts/lifecycle.md); with
``conn=`` that is the caller's commit. Dedup follows docs/concepts/dedup.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any
from uuid import UUID

from ...errors import DatabaseUnavailable, VenturiError
from ..base import (
    Enqueued,
    JobRecord,
    MergeFn,
    MergeUpdate,
    NewJob,
    NewJobBatch,
    PlainJob,
    WorkflowRecord,
    check_new_job_batch,
    check_new_jobs,
    check_plain_job,
)
from . import rows
from .driver import Executor
from .operations import Operations

_ZERO = dt.timedelta(0)
# From this many rows a batch goes in by COPY (plus one NOTIFY per kind, in the
# same transaction), which beats one INSERT ... unnest from there on
# (docs/benchmarks.md, enqueue_many). A driver may say otherwise (its
# ``copy_min_rows``): where it falls depends on the driver's client cost per row.
COPY_MIN_ROWS = 5_000
_COPY_COLUMNS = ["id", "kind", "payload", "priority", "max_failures", "carry", "dedup_key",
                 "subject", "periodic", "trace_context", "limit_key"]


def _unless_all(default: Any, values: list[Any]) -> list[Any] | None:
    """``values``, or None when every one equals ``default`` (see _insert)."""
    for v in values:
        if v != default:
            return values
    return None


def dedup_lock_key(prefix: str, kind: str, key: str) -> str:
    return f"{prefix}\x1f{kind}\x1f{key}"


class Producing(Operations):
    # A job with this many unfinished dependencies or more counts them through shards
    # (sql/0008_workflows_fanin.sql): below it, on its own row. Tests lower it to run
    # the shards on small graphs.
    fanin_shard_at = 64

    async def enqueue(
        self, jobs: Sequence[NewJob], *, merge: MergeFn | None = None, conn: Any = None
    ) -> list[Enqueued]:
        if not jobs:
            return []
        check_new_jobs(jobs)
        on = self._on(conn)
        if len(jobs) == 1 and not jobs[0].after and jobs[0].dedup_key is None:
            await self._insert(jobs, on)  # one plain job: what follows, decided at once
            return [Enqueued(jobs[0].id, False)]
        if any(j.after for j in jobs):
            await self._insert_waiting(jobs, on)
            return [Enqueued(j.id, False) for j in jobs]
        if all(j.dedup_key is None for j in jobs):
            await self._insert(jobs, on)
            return [Enqueued(j.id, False) for j in jobs]
        async with self.driver.session(on, keep=True) as ex, ex.atomic("venturi_enqueue"):
            return await self._enqueue_dedup(ex, jobs, merge)

    async def enqueue_plain(self, job: PlainJob, *, conn: Any = None) -> None:
        # _insert's first case, reached without a record, a list or a decision: the
        # job's fields are insert_now's parameters after the clock.
        check_plain_job(job)
        q, params = self._bind("insert_now", job)
        await self.driver.execute(q, params, on=None if conn is None else self.driver.adopt(conn),
                                  keep=True)

    def _copy_min_rows(self) -> int:
        rows: int = getattr(self.driver, "copy_min_rows", COPY_MIN_ROWS)
        return rows

    async def _insert(self, jobs: Sequence[NewJob], on: Executor | None) -> None:
        if len(jobs) == 1:  # first: the path of every single enqueue
            j = jobs[0]
            if (j.delay == _ZERO and j.at is None and j.carry is None and j.dedup_key is None
                    and j.subject is None and not j.periodic and j.trace_context is None
                    and j.limit_key is None):
                await self._execute("insert_now", j.id, j.kind, j.payload, j.priority,
                                    j.max_failures, on=on, keep=True)
                return
            await self._execute(
                "insert_one", j.id, j.kind, j.payload, j.priority, j.delay, j.at,
                j.max_failures, j.carry, j.dedup_key, j.subject, j.periodic, j.trace_context,
                j.limit_key, on=on, keep=True,
            )
            return
        if len(jobs) >= self._copy_min_rows():
            records = self._copy_records(jobs)
            if records is not None:
                await self._copy(on, records[0], records[1], {j.kind for j in jobs})
                return
        # A column at its default in every row is sent as one NULL array (unnest pads
        # it with NULLs, the SQL maps NULL to the default): encoding and decoding
        # 1,000 NULLs or zero intervals costs as much as the payloads.
        await self._execute(
            "insert_many",
            [j.id for j in jobs], [j.kind for j in jobs], [j.payload for j in jobs],
            [j.priority for j in jobs],
            _unless_all(_ZERO, [j.delay for j in jobs]),
            _unless_all(None, [j.at for j in jobs]),
            [j.max_failures for j in jobs],
            _unless_all(None, [j.carry for j in jobs]),
            _unless_all(None, [j.dedup_key for j in jobs]),
            _unless_all(None, [j.subject for j in jobs]),
            _unless_all(False, [j.periodic for j in jobs]),
            _unless_all(None, [j.trace_context for j in jobs]),
            _unless_all(None, [j.limit_key for j in jobs]),
            on=on, keep=True,
        )

    async def enqueue_workflow(self, workflow: WorkflowRecord, jobs: Sequence[NewJob], *,
                               conn: Any = None) -> None:
        check_new_jobs(jobs)
        async with self.driver.session(self._on(conn)) as ex, ex.atomic("venturi_workflow"):
            await self._insert_waiting(jobs, ex, workflow.id)
            await self._execute("insert_workflow", workflow.id, workflow.name, rows.encode(
                [(name, str(id)) for name, id in workflow.steps]), on=ex)

    async def _insert_waiting(self, jobs: Sequence[NewJob], on: Executor | None,
                              workflow: UUID | None = None) -> None:
        """A batch of which some jobs wait for others (docs/concepts/workflows.md): one
        statement, however the dependencies are spread in and out of the batch."""
        await self._execute(
            "insert_waiting",
            [j.id for j in jobs], [j.kind for j in jobs], [j.payload for j in jobs],
            [j.priority for j in jobs], [j.delay for j in jobs], [j.at for j in jobs],
            [j.max_failures for j in jobs], [j.carry for j in jobs],
            [j.dedup_key for j in jobs], [j.subject for j in jobs], [j.periodic for j in jobs],
            [j.trace_context for j in jobs],
            rows.encode([(str(j.id), str(a)) for j in jobs for a in j.after]),
            [j.run_on_failure for j in jobs], [j.limit_key for j in jobs],
            self.fanin_shard_at, workflow, on=on, keep=True,
        )

    async def _copy(self, on: Executor | None, columns: Sequence[str],
                    records: Iterator[Sequence[Any]], kinds: set[str]) -> None:
        """COPY the rows and send one wake-up per kind (COPY has no RETURNING to build
        them from), atomically: in a transaction, or a savepoint of the caller's."""
        async with self.driver.session(on, keep=True) as ex, ex.atomic("venturi_copy"):
            await ex.copy(self.schema, f"{self.prefix}jobs", columns, records)
            await self._execute("notify_kinds", sorted(kinds), on=ex)

    async def enqueue_batch(self, batch: NewJobBatch, *, conn: Any = None) -> None:
        # enqueue's plain insert, bound from the batch's columns as they are; the kinds
        # to wake are the batch's own (every row is visible at once).
        if not batch.ids:
            return
        check_new_job_batch(batch)
        on = self._on(conn)
        n = len(batch.ids)
        if n >= self._copy_min_rows():
            # A column at its default in every row (no subject, none periodic) is left
            # to the table's default rather than encoded a thousand times.
            columns = ["id", "kind", "payload", "priority", "max_failures"]
            cols: list[Any] = [batch.ids, batch.kinds, batch.payloads, batch.priorities,
                               batch.max_failures]
            if batch.subjects is not None:
                columns.append("subject")
                cols.append(batch.subjects)
            if batch.periodic is not None:
                columns.append("periodic")
                cols.append(batch.periodic)
            now = self.clock.now()
            if now is not None:
                columns += ["created_at", "visible_at"]
                cols += [repeat(now, n), repeat(now, n)]
            if batch.trace_context is not None:
                columns.append("trace_context")
                cols.append(repeat(batch.trace_context, n))
            await self._copy(on, columns, zip(*cols, strict=True), set(batch.kinds))
            return
        await self._execute(
            "insert_batch", batch.ids, batch.kinds, batch.payloads, batch.priorities,
            batch.max_failures, batch.subjects, batch.periodic, batch.trace_context,
            sorted(set(batch.kinds)), on=on, keep=True,
        )

    def _copy_records(
        self, jobs: Sequence[NewJob]
    ) -> tuple[list[str], Iterator[tuple[Any, ...]]] | None:
        """Columns and rows for COPY, or None when a row's visibility needs the
        database clock (``now() + delay``), which COPY cannot compute: then the
        table's defaults (``now()``) stand only for jobs visible at once. Rows
        are generated as COPY consumes them: a list of 50,000 tuples kept alive
        would cost more in garbage-collector passes than in building it."""
        now = self.clock.now()
        if now is None:
            if any(j.at is not None or j.delay != _ZERO for j in jobs):
                return None
            return _COPY_COLUMNS, ((j.id, j.kind, j.payload, j.priority, j.max_failures,
                                    j.carry, j.dedup_key, j.subject, j.periodic,
                                    j.trace_context, j.limit_key) for j in jobs)
        return [*_COPY_COLUMNS, "created_at", "visible_at"], (
            (j.id, j.kind, j.payload, j.priority, j.max_failures, j.carry, j.dedup_key,
             j.subject, j.periodic, j.trace_context, j.limit_key, now,
             j.at if j.at is not None else now + j.delay)
            for j in jobs
        )

    async def _enqueue_dedup(
        self, ex: Executor, jobs: Sequence[NewJob], merge: MergeFn | None
    ) -> list[Enqueued]:
        results: list[Enqueued] = []
        plain: list[NewJob] = []
        # Every key's lock before the first insert, several in one order for every batch
        # (enqueue.sql, dedup_locks).
        keys = [dedup_lock_key(self.prefix, j.kind, j.dedup_key)
                for j in jobs if j.dedup_key is not None]
        if len(keys) == 1:
            await self._execute("dedup_lock", keys[0], on=ex)
        elif keys:
            await self._execute("dedup_locks", keys, on=ex)
        for job in jobs:
            if job.dedup_key is None:
                plain.append(job)
                results.append(Enqueued(job.id, False))
                continue
            results.append(await self._enqueue_one_dedup(ex, job, merge))
        if plain:
            await self._insert(plain, ex)
        return results

    async def _enqueue_one_dedup(self, ex: Executor, job: NewJob,
                                 merge: MergeFn | None) -> Enqueued:
        """``job`` with its key's lock already held (``_enqueue_dedup``)."""
        assert job.dedup_key is not None
        row = await self._row("dedup_candidate", job.kind, job.dedup_key, on=ex)
        update = None
        if row is not None:
            update = merge(job, rows.job(row)) if merge else MergeUpdate()
        if row is not None and update is not None:
            try:
                # A savepoint: a failed merge leaves the plain insert open.
                async with ex.atomic("venturi_merge"):
                    if await self._val("merge_into", row[0], update.payload, update.priority,
                                       update.set_carry, update.carry, job.at, job.delay, None,
                                       on=ex):
                        return Enqueued(row[0], True)
            except DatabaseUnavailable:
                raise
            except VenturiError:
                pass  # the savepoint rolled back; fall through to a plain insert
        await self._insert([job], ex)
        return Enqueued(job.id, False)

    async def dedup_candidate(self, kind: str, dedup_key: str) -> JobRecord | None:
        async with self.driver.session() as ex, ex.atomic("venturi_candidate"):
            row = await self._row("dedup_candidate", kind, dedup_key, on=ex)
        return None if row is None else rows.job(row)

    async def merge_into(
        self, id: UUID, update: MergeUpdate, *, visible_at: dt.datetime | None = None,
        note: str | None = None,
    ) -> bool:
        applied = await self._val(
            "merge_into", id, update.payload, update.priority, update.set_carry, update.carry,
            visible_at, None, note,
        )
        return bool(applied)

    async def seed_periodic(self, jobs: Sequence[NewJob]) -> int:
        if not jobs:
            return 0
        check_new_jobs(jobs)
        n: int = await self._val(
            "seed_periodic", [j.id for j in jobs], [j.kind for j in jobs],
            [j.payload for j in jobs], [j.priority for j in jobs], [j.at for j in jobs],
            [j.max_failures for j in jobs], _unless_all(None, [j.trace_context for j in jobs]),
        )
        return n
