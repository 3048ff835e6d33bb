"""PostgresStore: the storage contract over an asyncpg pool.

Driver errors are translated here, once, into venturi's exception tree; no
code above the store catches an asyncpg exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, TypeVar, cast
from uuid import UUID

import asyncpg
import orjson

from .. import _codec
from ..config import mask_dsn, validate_prefix
from ..errors import (
    ConfigError,
    DatabaseError,
    DatabaseUnavailable,
    InvalidJob,
    SchemaMissing,
)
from . import _connect, _sql
from .base import (
    Action,
    ClaimRequest,
    CleanupCriteria,
    Clock,
    CountFilter,
    DatabaseClock,
    Detail,
    Enqueued,
    FailedJob,
    HistoryFilter,
    IdentityLock,
    JobRecord,
    JournalRecord,
    LeaseRenewal,
    Listener,
    MergeFn,
    MergeUpdate,
    NewJob,
    NewJobBatch,
    Outcome,
    Recovered,
    Settled,
    Settlement,
    Snapshot,
    Status,
    Store,
    WorkerInfo,
    check_new_job_batch,
    check_new_jobs,
)

ALL_STATUSES = [s.value for s in Status]

# SQLSTATE classes that mean "the server is not there right now" (rule 15).
_TRANSIENT_CLASSES = ("08", "57P")
_TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,
    # Left behind by a server session terminated mid-operation (asyncpg issue 1069):
    # the connection is stuck mid-protocol; ``_conn`` discards it, a new one works.
    asyncpg.InternalClientError,
)


def translate(exc: BaseException, prefix: str, dsn: str | None = None) -> BaseException:
    """Map a driver exception to venturi's tree (one line, no secrets)."""
    where = f" ({mask_dsn(dsn)})" if dsn else ""
    if isinstance(exc, asyncpg.DataError):
        # A value the driver cannot encode: the caller's input, never transient.
        return DatabaseError(f"invalid query argument: {_line(exc)}")
    if isinstance(exc, asyncpg.UndefinedTableError):
        return SchemaMissing(prefix)
    if isinstance(
        exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
    ):
        return DatabaseError(f"authentication failed{where}: check the user and password")
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return DatabaseError(f"database does not exist{where}: create it or fix the DSN")
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        if state.startswith(_TRANSIENT_CLASSES):
            return DatabaseUnavailable(f"database unavailable{where}: {_line(exc)}")
        if state == "22P05" or state == "22021":  # untranslatable character / bad encoding
            return InvalidJob(f"payload cannot be stored as jsonb ({_line(exc)})")
        return DatabaseError(f"database error {state}: {_line(exc)}")
    if isinstance(exc, _TRANSIENT_ERRORS):
        detail = _line(exc) or type(exc).__name__
        return DatabaseUnavailable(f"database unavailable{where}: {detail}")
    return exc


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


@contextlib.contextmanager
def _translated(prefix: str, dsn: str | None = None) -> Any:
    try:
        yield
    except (asyncpg.PostgresError, *_TRANSIENT_ERRORS) as exc:  # type: ignore[misc]
        raise translate(exc, prefix, dsn) from None


# Enum lookups by value without the enum machinery's call: once per claimed or settled row.
_STATUS = {s.value: s for s in Status}
_OUTCOME = {o.value: o for o in Outcome}


def _json_value(text: str) -> Any:
    """jsonb text as Python. jsonb holds what orjson refuses, from rows written by other
    software: numbers beyond a double (``1e400``, printed as a 401-digit integer) and
    nesting deeper than 1,024 levels. The standard library parses the numbers; for
    what neither parses the text itself stands in, so the task's decoding refuses it
    (``payload-...``) and the job, not the claim and the worker, dies of it."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _record(r: Any) -> JobRecord:
    carry = r[13]
    return JobRecord(
        id=r[0], kind=r[1], payload=_json_value(r[2]), priority=r[3], status=_STATUS[r[4]],
        created_at=r[5], visible_at=r[6], claim_expires_at=r[7], claimed_by=r[8],
        finished_at=r[9], run_count=r[10], failure_count=r[11], max_failures=r[12],
        carry=None if carry is None else _json_value(carry), dedup_key=r[14],
        subject=r[15], periodic=r[16],
    )


_COMPLETED = (Status.COMPLETED, Outcome.COMPLETED)
_Keyed = TypeVar("_Keyed", Settlement, LeaseRenewal)


def _by_id(items: Sequence[_Keyed]) -> Iterator[dict[UUID, _Keyed]]:
    """The batch keyed by job id, in rounds: the settle and renewal statements find
    each row's input under its id, so two epochs of one id go in separate rounds."""
    rest = list(items)
    while rest:
        keyed = {x.id: x for x in reversed(rest)}  # the first of each id this round
        yield keyed
        rest = [x for x in rest if keyed[x.id] is not x]


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@contextlib.asynccontextmanager
async def _atomic(c: Any, savepoint: str) -> AsyncIterator[None]:
    """All or nothing on ``c``: our own transaction, or a savepoint inside the
    caller's however it began (asyncpg's ``transaction()`` refuses to nest in
    one opened with a plain ``BEGIN``, and ``conn=`` may be any connection)."""
    if not c.is_in_transaction():
        async with c.transaction():
            yield
        return
    await c.execute(f"SAVEPOINT {savepoint}")
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            await c.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
            await c.execute(f"RELEASE SAVEPOINT {savepoint}")
        raise
    await c.execute(f"RELEASE SAVEPOINT {savepoint}")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset hook that skips asyncpg's reset query, a round trip on every
    release (200-400 µs per pooled call on the benchmark machine). Safe because
    the store leaves no session state on pool connections: LISTEN and session
    locks live on dedicated connections, migrate() takes a transaction-scoped
    lock, and asyncpg itself still rolls back a transaction left open."""


_ZERO = dt.timedelta(0)
# From this many rows a batch goes in by COPY (plus one NOTIFY per kind, in the
# same transaction): twice the rows per second of an unnest INSERT at 50,000.
COPY_MIN_ROWS = 5_000
# How long an insert's connection stays out of the pool, unused, for the next insert
# (between one and two times this): see PostgresStore._keep.
LINGER = 0.05


def _unless_all(default: Any, values: list[Any]) -> list[Any] | None:
    """``values``, or None when every one equals ``default`` (see insert_many)."""
    for v in values:
        if v != default:
            return values
    return None


def dedup_lock_key(prefix: str, kind: str, key: str) -> str:
    return f"{prefix}\x1f{kind}\x1f{key}"


def _usable(c: Any) -> bool:
    """Whether a kept connection can run a statement. One whose session was lost
    while kept is not: asyncpg closed it and took its slot back into the pool
    (its proxy is detached) or will when it is released."""
    try:
        return not c.is_closed()
    except asyncpg.InterfaceError:  # detached: the slot is back in the pool
        return False


class PostgresStore(Store):
    """The production store. Build it with :meth:`connect`."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        prefix: str,
        dsn: str | None = None,
        listen_dsn: str | None = None,
        clock: Clock | None = None,
        owns_pool: bool = False,
        schema: str | None = None,
        pooler: bool = False,
    ) -> None:
        self.prefix = validate_prefix(prefix)
        self.pool = pool
        self.dsn = dsn
        self.pooler = pooler
        self.listen_dsn = listen_dsn or dsn
        self.clock = clock or DatabaseClock()
        self.schema = schema
        self._q = _sql.queries(self.prefix, schema)
        self._owns_pool = owns_pool
        # Connections an insert just used, kept for the next one (see _keep). Only
        # on a pool the store owns: another user of a shared pool could not take them.
        self._idle: list[Any] = []
        self._linger = owns_pool
        self._kept = 0  # connections kept so far: has any insert run since the timer was set?
        self._timer: asyncio.TimerHandle | None = None
        self._releasing: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        prefix: str = "venturi_",
        min_size: int = 1,
        max_size: int = 10,
        pooler: bool = False,
        listen_dsn: str | None = None,
        clock: Clock | None = None,
        connect_timeout: float = 10.0,
    ) -> PostgresStore:
        """Open a pool. ``pooler=True`` turns the statement cache off, for
        PgBouncer in transaction mode (pass ``listen_dsn`` to reach PostgreSQL
        directly for LISTEN)."""
        validate_prefix(prefix)
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError("no database DSN given: set --dsn or VENTURI_DSN")
        try:
            pool = await asyncpg.create_pool(
                dsn, min_size=min_size, max_size=max_size, timeout=connect_timeout,
                statement_cache_size=0 if pooler else 256,
                max_inactive_connection_lifetime=60.0, reset=_keep_session,
                connect=cast(Any, _connect.connect),  # the stubs' protocol spells out every option
            )
        except (ValueError, TypeError, asyncpg.ClientConfigurationError) as exc:
            # Before the transient errors: ClientConfigurationError is an InterfaceError.
            raise ConfigError(f"invalid DSN {mask_dsn(dsn)}: {_line(exc)}") from None
        except (asyncpg.PostgresError, *_TRANSIENT_ERRORS) as exc:  # type: ignore[misc]
            raise translate(exc, prefix, dsn) from None
        try:
            # Where migrate creates the tables; statements name it explicitly (DESIGN §5).
            with _translated(prefix, dsn):
                schema: str | None = await pool.fetchval("SELECT current_schema()")
        except BaseException:
            pool.terminate()
            raise
        return cls(pool, prefix=prefix, dsn=dsn, listen_dsn=listen_dsn, clock=clock,
                   owns_pool=True, schema=schema, pooler=pooler)

    async def close(self) -> None:
        self._linger = False
        await self._return_idle()
        if self._owns_pool:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.pool.close(), timeout=5)
            self.pool.terminate()

    # --- plumbing --------------------------------------------------------------------

    def _args(self, name: str, *args: Any) -> tuple[str, tuple[Any, ...]]:
        q = self._q[name]
        if q.uses_now:
            return q.sql, (self.clock.now(), *args)
        return q.sql, args

    @contextlib.asynccontextmanager
    async def _conn(self, conn: Any = None) -> AsyncIterator[Any]:
        with _translated(self.prefix, self.dsn):
            if conn is not None:
                yield conn
            elif self._idle:
                # A connection an insert kept (see _keep), back to the pool afterwards.
                async with self._checked_out(keep=False) as c:
                    yield c
            else:
                async with self.pool.acquire() as acquired:
                    try:
                        yield acquired
                    except asyncpg.InternalClientError:
                        acquired.terminate()  # back in the pool it fails every later use
                        raise

    # An asyncpg pool acquire/release costs 40-100 µs on the benchmark machine (a
    # proxy, a shielded release task, an inactivity timer re-armed each time): a
    # fifth of a single-row enqueue. The insert paths instead keep the connection
    # they just used, so a producer enqueuing in a loop reuses it at the cost of a
    # list pop; a timer gives it back to the pool once no insert has run for
    # LINGER seconds. A connection is kept only after a statement that succeeded
    # outside a transaction; after any error (a broken connection, a cancellation
    # mid-statement) it goes back through the pool's own release, which waits out a
    # cancel and rolls back. The store's other statements take a kept connection
    # before asking the pool, so they never wait for the timer.

    async def _checkout(self) -> Any:
        idle = self._idle
        while idle:
            c = idle.pop()
            if _usable(c):
                return c
            # A closed connection's slot goes back to the pool (a no-op when asyncpg
            # already took it back), which reconnects it on a later acquire.
            with contextlib.suppress(Exception):
                await self.pool.release(c)
        return await self.pool.acquire()

    def _keep(self, c: Any) -> bool:
        """Keep ``c`` (whose statement succeeded) for the next insert; False: release it."""
        if not self._linger or c.is_closed() or c.is_in_transaction():
            return False
        self._idle.append(c)
        self._kept += 1
        if self._timer is None:
            # One timer per LINGER, not per insert: a timer (unlike call_soon) costs
            # the event loop no extra turn until it fires.
            self._timer = asyncio.get_running_loop().call_later(
                LINGER, self._on_linger, self._kept)
        return True

    def _on_linger(self, kept: int) -> None:
        self._timer = None
        if not self._idle:
            return
        if self._kept != kept:  # inserts ran since: look again in LINGER
            self._timer = asyncio.get_running_loop().call_later(
                LINGER, self._on_linger, self._kept)
            return
        idle, self._idle = self._idle, []
        task = asyncio.get_running_loop().create_task(self._release(idle))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _release(self, conns: list[Any]) -> None:
        for c in conns:
            with contextlib.suppress(Exception):
                await self.pool.release(c)

    async def _return_idle(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        idle, self._idle = self._idle, []
        await self._release(idle)
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)

    async def _discard(self, c: Any, exc: BaseException) -> None:
        if isinstance(exc, asyncpg.InternalClientError):
            c.terminate()  # back in the pool it fails every later use
        await self.pool.release(c)

    @contextlib.asynccontextmanager
    async def _checked_out(self, *, keep: bool) -> AsyncIterator[Any]:
        """A kept connection (else one from the pool); afterwards kept again when ``keep``
        and the statement succeeded, else given back."""
        c = await self._checkout()
        try:
            yield c
        except BaseException as exc:
            await self._discard(c, exc)
            raise
        if not (keep and self._keep(c)):
            await self.pool.release(c)

    @contextlib.asynccontextmanager
    async def _hot_conn(self, conn: Any = None) -> AsyncIterator[Any]:
        """``_conn`` for the insert and claim paths: the connection is kept for the next."""
        with _translated(self.prefix, self.dsn):
            if conn is not None:
                yield conn
                return
            async with self._checked_out(keep=True) as c:
                yield c

    async def _hot_execute(self, sql: str, params: Sequence[Any], conn: Any) -> None:
        """One statement on the insert path; ``_hot_conn`` inlined, as it runs once per job."""
        try:
            if conn is not None:
                await conn.execute(sql, *params)
                return
            # _checkout's common case without awaiting a coroutine for it.
            idle = self._idle
            c = idle.pop() if idle and _usable(idle[-1]) else await self._checkout()
            try:
                await c.execute(sql, *params)
            except BaseException as exc:
                await self._discard(c, exc)
                raise
            if not self._keep(c):
                await self.pool.release(c)
        except (asyncpg.PostgresError, *_TRANSIENT_ERRORS) as exc:  # type: ignore[misc]
            raise translate(exc, self.prefix, self.dsn) from None

    async def _fetch(self, name: str, *args: Any, conn: Any = None) -> list[Any]:
        sql, params = self._args(name, *args)
        async with self._conn(conn) as c:
            rows: list[Any] = await c.fetch(sql, *params)
            return rows

    async def _val(self, name: str, *args: Any, conn: Any = None) -> Any:
        sql, params = self._args(name, *args)
        async with self._conn(conn) as c:
            return await c.fetchval(sql, *params)

    async def _row(self, name: str, *args: Any, conn: Any = None) -> Any:
        sql, params = self._args(name, *args)
        async with self._conn(conn) as c:
            return await c.fetchrow(sql, *params)

    # --- schema ------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations in one transaction under a transaction-scoped
        lock: a session lock would be taken on one pooled server connection and
        released on another behind PgBouncer in transaction mode."""
        applied: list[str] = []
        async with self._conn() as c, c.transaction():
            await c.execute(self._q["migrate_lock"].sql, self.prefix)
            await c.execute(self._q["migrations_table"].sql)
            done = {r[0] for r in await c.fetch(self._q["applied_migrations"].sql)}
            for version, name, raw in _sql.migrations():
                if version in done:
                    continue
                await c.execute(_sql.render_migration(raw, self.prefix))
                await c.execute(self._q["record_migration"].sql, version, name)
                applied.append(name)
        return applied

    # --- producing ---------------------------------------------------------------------

    async def enqueue(
        self, jobs: Sequence[NewJob], *, merge: MergeFn | None = None, conn: Any = None
    ) -> list[Enqueued]:
        if not jobs:
            return []
        check_new_jobs(jobs)
        if all(j.dedup_key is None for j in jobs):
            await self._insert(jobs, conn)
            return [Enqueued(j.id, False) for j in jobs]
        async with self._hot_conn(conn) as c, _atomic(c, "venturi_enqueue"):
            return await self._enqueue_dedup(c, jobs, merge)

    async def _insert(self, jobs: Sequence[NewJob], conn: Any) -> None:
        if len(jobs) >= COPY_MIN_ROWS:
            records = self._copy_records(jobs)
            if records is not None:
                async with self._hot_conn(conn) as c, _atomic(c, "venturi_copy"):
                    await c.copy_records_to_table(
                        f"{self.prefix}jobs", records=records[1], columns=records[0])
                    await c.execute(self._q["notify_kinds"].sql,
                                    sorted({j.kind for j in jobs}))
                return
        if len(jobs) == 1:
            j = jobs[0]
            sql, params = self._args(
                "insert_one", j.id, j.kind, j.payload, j.priority, j.delay, j.at,
                j.max_failures, j.carry, j.dedup_key, j.subject, j.periodic,
            )
        else:
            # A column at its default in every row is sent as one NULL array
            # (unnest pads it with NULLs, the SQL maps NULL to the default):
            # encoding and decoding 1,000 NULLs or zero intervals costs as much
            # as the payloads.
            sql, params = self._args(
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
            )
        await self._hot_execute(sql, params, conn)

    async def enqueue_batch(self, batch: NewJobBatch, *, conn: Any = None) -> None:
        # enqueue's plain insert, bound from the batch's columns as they are.
        if not batch.ids:
            return
        check_new_job_batch(batch)
        if len(batch.ids) >= COPY_MIN_ROWS:
            columns = ["id", "kind", "payload", "priority", "max_failures", "subject", "periodic"]
            n = len(batch.ids)
            cols: list[Any] = [batch.ids, batch.kinds, batch.payloads, batch.priorities,
                               batch.max_failures, batch.subjects or repeat(None, n),
                               batch.periodic or repeat(False, n)]
            now = self.clock.now()
            if now is not None:
                columns += ["created_at", "visible_at"]
                cols += [repeat(now, n), repeat(now, n)]
            async with self._hot_conn(conn) as c, _atomic(c, "venturi_copy"):
                await c.copy_records_to_table(
                    f"{self.prefix}jobs", records=zip(*cols, strict=True), columns=columns)
                await c.execute(self._q["notify_kinds"].sql, sorted(set(batch.kinds)))
            return
        sql, params = self._args(
            "insert_many", batch.ids, batch.kinds, batch.payloads, batch.priorities,
            None, None, batch.max_failures, None, None, batch.subjects, batch.periodic,
        )
        await self._hot_execute(sql, params, conn)

    def _copy_records(
        self, jobs: Sequence[NewJob]
    ) -> tuple[list[str], Iterator[tuple[Any, ...]]] | None:
        """Columns and rows for COPY, or None when a row's visibility needs the
        database clock (``now() + delay``), which COPY cannot compute: then the
        table's defaults (``now()``) stand only for jobs visible at once. Rows
        are generated as COPY consumes them: a list of 50,000 tuples kept alive
        would cost more in garbage-collector passes than in building it."""
        now = self.clock.now()
        columns = ["id", "kind", "payload", "priority", "max_failures", "carry", "dedup_key",
                   "subject", "periodic"]
        if now is None:
            if any(j.at is not None or j.delay != _ZERO for j in jobs):
                return None
            return columns, ((j.id, j.kind, j.payload, j.priority, j.max_failures, j.carry,
                              j.dedup_key, j.subject, j.periodic) for j in jobs)
        return [*columns, "created_at", "visible_at"], (
            (j.id, j.kind, j.payload, j.priority, j.max_failures, j.carry, j.dedup_key,
             j.subject, j.periodic, now, j.at if j.at is not None else now + j.delay)
            for j in jobs
        )

    async def _enqueue_dedup(
        self, c: Any, jobs: Sequence[NewJob], merge: MergeFn | None
    ) -> list[Enqueued]:
        results: list[Enqueued] = []
        plain: list[NewJob] = []
        for job in jobs:
            if job.dedup_key is None:
                plain.append(job)
                results.append(Enqueued(job.id, False))
                continue
            results.append(await self._enqueue_one_dedup(c, job, merge))
        if plain:
            await self._insert(plain, c)
        return results

    async def _enqueue_one_dedup(self, c: Any, job: NewJob, merge: MergeFn | None) -> Enqueued:
        assert job.dedup_key is not None
        await c.execute(self._q["dedup_lock"].sql,
                        dedup_lock_key(self.prefix, job.kind, job.dedup_key))
        row = await c.fetchrow(self._q["dedup_candidate"].sql, job.kind, job.dedup_key)
        update = None
        if row is not None:
            update = merge(job, _record(row)) if merge else MergeUpdate()
        if update is not None:
            try:
                # A savepoint: a failed merge leaves the plain insert open.
                async with _atomic(c, "venturi_merge"):
                    sql, params = self._args(
                        "merge_into", row[0], update.payload, update.priority,
                        update.set_carry, update.carry, job.at, job.delay, None,
                    )
                    if await c.fetchval(sql, *params):
                        return Enqueued(row[0], True)
            except asyncpg.PostgresError:
                pass  # the savepoint rolled back; fall through to a plain insert
        await self._insert([job], c)
        return Enqueued(job.id, False)

    async def dedup_candidate(self, kind: str, dedup_key: str) -> JobRecord | None:
        async with self._conn() as c, c.transaction():
            row = await c.fetchrow(self._q["dedup_candidate"].sql, kind, dedup_key)
        return None if row is None else _record(row)

    async def merge_into(
        self, id: UUID, update: MergeUpdate, *, visible_at: dt.datetime | None = None,
        note: str | None = None,
    ) -> bool:
        applied = await self._val(
            "merge_into", id, update.payload, update.priority, update.set_carry, update.carry,
            visible_at, None, note,
        )
        return bool(applied)

    # --- working -----------------------------------------------------------------------

    async def claim(self, request: ClaimRequest) -> list[JobRecord]:
        if request.limit <= 0 or not request.leases:
            return []
        kinds = list(request.leases)
        low, normal = request.reservations()
        sql, params = self._args(
            "claim", kinds, [request.leases[k] for k in kinds], request.limit, normal, low,
            request.claimed_by,
        )
        # A worker claims again as soon as slots free up: like an insert, a claim keeps
        # its connection for the next one (pickup latency and claim rate both pay the
        # pool's acquire and release otherwise).
        async with self._hot_conn() as c:
            rows = await c.fetch(sql, *params)
        return [_record(r) for r in rows]

    async def settle_many(
        self, claimed_by: str, settlements: Sequence[Settlement]
    ) -> list[Settled]:
        if not settlements:
            return []
        # One UPDATE touches a row once, whatever the number of input rows that
        # match it: send each (id, run_no) once, so a repeat reports not applied.
        first: dict[tuple[UUID, int], int] = {}
        for index, x in enumerate(settlements):
            first.setdefault((x.id, x.run_no), index)
        s = [settlements[i] for i in sorted(first.values())]
        applied: dict[tuple[UUID, int], tuple[Status, Outcome]] = {}
        if all(x.action is Action.COMPLETE and x.successor is None and not x.set_carry
               for x in s):
            for keyed in _by_id(s):
                done = await self._fetch("settle_completions", claimed_by, list(keyed), _json(
                    {str(k): (x.run_no, x.note, x.attachment) for k, x in keyed.items()}))
                applied.update(((r[0], r[1]), _COMPLETED) for r in done)
        else:
            for keyed in _by_id(s):
                rows = await self._fetch("settle_many", claimed_by, list(keyed), _json({
                    str(k): (x.run_no, x.action.value, x.note, x.attachment, _micros(x.delay),
                             x.set_carry, x.carry,
                             str(x.successor[0]) if x.successor else None,
                             x.successor[1].isoformat() if x.successor else None)
                    for k, x in keyed.items()}))
                applied.update(((r[0], r[5]), (_STATUS[r[1]], _OUTCOME[r[2]])) for r in rows)
        out = []
        for index, x in enumerate(settlements):
            hit = applied.get((x.id, x.run_no)) if first[x.id, x.run_no] == index else None
            out.append(Settled(x.id, hit is not None, *(hit or (None, None))))
        return out

    async def extend_leases(
        self, claimed_by: str, renewals: Sequence[LeaseRenewal]
    ) -> set[UUID]:
        if not renewals:
            return set()
        # The last renewal of a claim wins, as if they were applied in order.
        latest = list({(r.id, r.run_no): r for r in renewals}.values())
        kept: set[UUID] = set()
        for keyed in _by_id(latest):
            rows = await self._fetch("extend_leases", claimed_by, list(keyed), _json(
                {str(k): (r.run_no, _micros(r.lease)) for k, r in keyed.items()}))
            kept.update(r[0] for r in rows)
        return kept

    async def find_stale(self, limit: int = 1000) -> list[JobRecord]:
        return [_record(r) for r in await self._fetch("find_stale", limit)]

    async def recover(self, id: UUID, run_no: int) -> Recovered | None:
        row = await self._row("recover", id, run_no)
        return None if row is None else Recovered(row[0], row[1], row[2], Status(row[3]), row[4])

    async def recover_stale(self, limit: int = 1000) -> list[Recovered]:
        rows = await self._fetch("recover_stale", limit)
        return [Recovered(r[0], r[1], r[2], Status(r[3]), r[4]) for r in rows]

    async def recover_boot(self, name: str, claimed_by: str) -> list[Recovered]:
        rows = await self._fetch("recover_boot", name, claimed_by)
        return [Recovered(r[0], r[1], r[2], Status(r[3]), r[4]) for r in rows]

    async def next_visible_at(self, kinds: Sequence[str]) -> dt.datetime | None:
        result: dt.datetime | None = await self._val("next_visible_at", list(kinds))
        return result

    async def seed_periodic(self, jobs: Sequence[NewJob]) -> int:
        if not jobs:
            return 0
        check_new_jobs(jobs)
        n: int = await self._val(
            "seed_periodic", [j.id for j in jobs], [j.kind for j in jobs],
            [j.payload for j in jobs], [j.priority for j in jobs], [j.at for j in jobs],
            [j.max_failures for j in jobs],
        )
        return n

    # --- inspecting --------------------------------------------------------------------

    async def job(self, id: UUID) -> JobRecord | None:
        row = await self._row("job", id)
        return None if row is None else _record(row)

    async def journal(self, id: UUID) -> list[JournalRecord]:
        return [
            JournalRecord(r[0], r[1], r[2], r[3], r[4], Outcome(r[5]), r[6], _codec.loads(r[7]))
            for r in await self._fetch("journal", id)
        ]

    async def query_jobs(self, filter: HistoryFilter) -> list[JobRecord]:
        rows = await self._fetch(
            "query_jobs", filter.kind, filter.status.value if filter.status else None,
            filter.finished_since, filter.finished_until, filter.before, filter.limit,
        )
        return [_record(r) for r in rows]

    async def count(self, filter: CountFilter) -> int:
        statuses = [s.value for s in filter.statuses] if filter.statuses else ALL_STATUSES
        if filter.subject is not None:
            n = await self._val("count_subject", filter.subject, filter.kind, statuses)
        elif filter.kind is not None:
            n = await self._val("count_kind", filter.kind, statuses)
        else:
            n = await self._val("count_all", statuses)
        return int(n)

    async def stats(self) -> Snapshot:
        snap = Snapshot()
        async with self._conn() as c:
            now_args = (self.clock.now(),)
            active = await c.fetch(self._q["stats_active"].sql, *now_args)
            dead = await c.fetch(self._q["stats_dead"].sql)
            finished = await c.fetchval(self._q["stats_finished"].sql)
            db_now = now_args[0] or await c.fetchval("SELECT now()")
        counts = dict.fromkeys(ALL_STATUSES, 0)
        for kind, status, runnable, n, oldest in active:
            counts[status] += n
            if status == "claimed":
                snap.claimed_by_kind[kind] = snap.claimed_by_kind.get(kind, 0) + n
            elif runnable:
                snap.pending_by_kind[kind] = n
                snap.oldest_pending_age[kind] = max(db_now - oldest, dt.timedelta(0))
            else:
                snap.scheduled_by_kind[kind] = n
        for kind, n in dead:
            snap.dead_by_kind[kind] = n
        counts["dead"] = sum(snap.dead_by_kind.values())
        counts["completed"] = int(finished) - counts["dead"]
        return Snapshot(
            pending_by_kind=snap.pending_by_kind, scheduled_by_kind=snap.scheduled_by_kind,
            oldest_pending_age=snap.oldest_pending_age, claimed=counts["claimed"],
            claimed_by_kind=snap.claimed_by_kind, dead_by_kind=snap.dead_by_kind,
            counts_by_status=counts,
        )

    async def detail(self, limit: int) -> Detail:
        age = await self._val("oldest_runnable")
        rows = await self._fetch("detail_failed", limit)
        return Detail(
            oldest_pending_age=None if age is None else max(age, dt.timedelta(0)),
            failed=[FailedJob(r[0], r[1], r[2], r[4], r[3]) for r in rows],
        )

    # --- administering ---------------------------------------------------------------------

    async def cancel(
        self, *, ids: Sequence[UUID] | None = None, subject: str | None = None, conn: Any = None
    ) -> int:
        if ids is not None:
            row = await self._row("cancel_ids", list(ids), conn=conn)
        else:
            row = await self._row("cancel_subject", subject, conn=conn)
        return int(row[0])

    async def retry(self, *, ids: Sequence[UUID] | None = None, kind: str | None = None) -> int:
        if ids is not None:
            row = await self._row("retry_ids", list(ids))
        else:
            row = await self._row("retry_kind", kind)
        return int(row[0])

    async def cleanup(self, criteria: CleanupCriteria) -> int:
        statuses = [criteria.status.value] if criteria.status else ["completed", "dead"]
        total = 0
        while True:
            n = int(await self._val("cleanup_batch", criteria.finished_before, statuses,
                                    criteria.kind, criteria.batch_size))
            total += n
            if n < criteria.batch_size:
                return total

    # --- workers and control -----------------------------------------------------------------

    async def heartbeat(self, info: WorkerInfo) -> None:
        sql, params = self._args(
            "heartbeat", info.name, info.boot_id, info.host, info.pid, list(info.kinds),
            info.concurrency, info.in_flight, info.draining, info.started_at,
        )
        async with self._conn() as c:
            await c.execute(sql, *params)

    async def forget_worker(self, name: str, boot_id: str) -> None:
        async with self._conn() as c:
            await c.execute(self._q["forget_worker"].sql, name, boot_id)

    async def workers(self) -> list[WorkerInfo]:
        return [
            WorkerInfo(name=r[0], boot_id=r[1], host=r[2], pid=r[3], kinds=list(r[4]),
                       concurrency=r[5], in_flight=r[6], started_at=r[7], last_seen=r[8],
                       draining=r[9])
            for r in await self._fetch("workers")
        ]

    async def notify_control(self, message: Mapping[str, Any]) -> None:
        async with self._conn() as c:
            await c.execute(self._q["notify_control"].sql, orjson.dumps(message).decode())

    async def cleanup_exclusive(self, criteria: CleanupCriteria) -> int | None:
        statuses = [criteria.status.value] if criteria.status else ["completed", "dead"]
        row = await self._row("cleanup_exclusive", criteria.finished_before, statuses,
                              criteria.kind, criteria.batch_size, self.prefix)
        return int(row[1]) if row[0] else None

    async def db_now(self) -> dt.datetime:
        now = self.clock.now()
        if now is not None:
            return now
        result: dt.datetime = await self._val("db_now")
        return result

    def _direct_dsn(self, what: str) -> str:
        """The DSN for a connection that must keep its session (LISTEN, session locks)."""
        if self.pooler and self.listen_dsn == self.dsn:
            raise ConfigError(
                f"{what} needs a direct connection to PostgreSQL, not the pooler: "
                "pass listen_dsn (--listen-dsn)"
            )
        return self.listen_dsn or ""

    def listen(self) -> Listener:
        return PostgresListener(self._direct_dsn("LISTEN"), self.prefix)

    def identity_lock(self, name: str) -> IdentityLock:
        return PostgresIdentityLock(self._direct_dsn("the worker identity lock"), self.prefix,
                                    name, self._q["identity_lock"].sql,
                                    self._q["identity_reclaim"].sql)


class PostgresIdentityLock(IdentityLock):
    """A session advisory lock on a dedicated connection (not the pool: a pooled
    connection would carry the lock back into the pool, or lose it in a pooler)."""

    def __init__(self, dsn: str, prefix: str, name: str, sql: str, reclaim_sql: str) -> None:
        self._dsn = dsn
        self._prefix = prefix
        self._name = name
        self._sql = sql
        self._reclaim_sql = reclaim_sql
        self._conn: Any = None
        self._holder: int | None = None  # backend pid of the session that took the lock
        self.lost = asyncio.Event()

    async def __aenter__(self) -> PostgresIdentityLock:
        return self

    async def acquire(self) -> bool:
        await self._close()
        self.lost = asyncio.Event()
        lost = self.lost
        with _translated(self._prefix, self._dsn):
            self._conn = await _connect.connect(self._dsn, timeout=10, statement_cache_size=0)
            self._conn.add_termination_listener(lambda _c: lost.set())
            await _connect.server_aware(self._conn)
            got: bool = await self._conn.fetchval(self._sql, self._prefix, self._name)
            if not got and self._holder is not None and await self._conn.fetchval(
                    self._reclaim_sql, self._holder, self._prefix, self._name):
                for _ in range(50):  # the ended session lets go as it exits
                    await asyncio.sleep(0.1)
                    got = await self._conn.fetchval(self._sql, self._prefix, self._name)
                    if got:
                        break
        if not got:
            await self._close()
            return False
        self._holder = self._conn.get_server_pid()
        return True

    async def ping(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            with _translated(self._prefix, self._dsn):
                await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=5)
        except DatabaseUnavailable:
            self.lost.set()

    async def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout=2)
            conn.terminate()

    async def __aexit__(self, *exc: object) -> None:
        await self._close()


class PostgresListener(Listener):
    """LISTEN on ``{prefix}jobs`` and ``{prefix}control`` on a dedicated connection
    (a pool's reset would run ``UNLISTEN *``)."""

    def __init__(self, dsn: str, prefix: str) -> None:
        self._dsn = dsn
        self._prefix = prefix
        self._queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        self._conn: Any = None

    async def __aenter__(self) -> PostgresListener:
        with _translated(self._prefix, self._dsn):
            self._conn = await _connect.connect(self._dsn, timeout=10, statement_cache_size=0)
            self._conn.add_termination_listener(lambda _c: self._queue.put_nowait(None))
            await _connect.server_aware(self._conn)
            for channel, label in ((f"{self._prefix}jobs", "jobs"),
                                   (f"{self._prefix}control", "control")):
                await self._conn.add_listener(channel, self._callback(label))
        return self

    def _callback(self, label: str) -> Any:
        def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            self._queue.put_nowait((label, payload))
        return on_notify

    async def __aexit__(self, *exc: object) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.close(), timeout=2)
            self._conn.terminate()

    async def receive(self) -> tuple[str, str]:
        item = await self._queue.get()
        if item is None:
            raise DatabaseUnavailable("listen connection lost")
        return item

    async def ping(self) -> None:
        """Round-trip on the LISTEN connection, so a silently dead socket is noticed."""
        with _translated(self._prefix, self._dsn):
            await asyncio.wait_for(self._conn.fetchval("SELECT 1"), timeout=5)
