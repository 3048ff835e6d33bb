"""venturi's exception tree.

Every error venturi raises on purpose derives from `VenturiError`, and
its message is one line that says what is wrong and what to do about it.
Driver exceptions (asyncpg, OSError) are translated once, at the store
boundary; nothing above the store catches them.

```text
VenturiError
├── ConfigError            bad prefix, lease, concurrency, DSN ... (also ValueError)
├── TaskDefinitionError    a Task subclass that cannot work (also TypeError)
├── UnknownKind            a kind no registered task defines (also LookupError)
├── InvalidJob             a job that cannot be stored; `index` names it in a batch
├── InvalidJobId           a job id or cursor that is not a UUID (also ValueError)
├── PayloadDecodeError     a stored payload that no longer fits its task
├── SchemaMissing          the tables are not there: run `venturi migrate`
├── JobFailed              queue.result(): the job died; `reason` is its dead entry's note
├── JobCancelled           queue.result(): the job is gone (cancelled, or deleted)
└── DatabaseError          the database refused or failed a statement
    └── DatabaseUnavailable  the database cannot be reached (transient: docs/concepts/failures.md)
```
"""

from __future__ import annotations

from uuid import UUID


class VenturiError(Exception):
    """Root of every error venturi raises on purpose."""


class ConfigError(VenturiError, ValueError):
    """A setting is invalid; raised before any SQL runs."""


class TaskDefinitionError(VenturiError, TypeError):
    """A Task subclass is malformed (bad field type, duplicate kind, ...)."""


class UnknownKind(VenturiError, LookupError):
    """No registered task has this kind."""

    def __init__(self, kind: str, known: list[str] | None = None) -> None:
        self.kind = kind
        self.known = sorted(known or [])
        hint = f"; known kinds: {', '.join(self.known)}" if self.known else ""
        super().__init__(f"unknown task kind {kind!r}{hint}")


class InvalidJob(VenturiError, ValueError):
    """A job cannot be stored. In a batch, ``index`` is the offending position."""

    def __init__(self, reason: str, *, index: int | None = None) -> None:
        self.reason = reason
        self.index = index
        where = f"job {index}: " if index is not None else ""
        suffix = " (nothing was enqueued)" if index is not None else ""
        super().__init__(f"{where}{reason}{suffix}")


class InvalidJobId(VenturiError, ValueError):
    """A job id or cursor that is not a UUID."""


class PayloadDecodeError(VenturiError):
    """A stored payload does not decode into its task any more.

    ``classification`` is a short, content-free reason fit for the journal.
    """

    def __init__(self, classification: str, detail: str) -> None:
        self.classification = classification
        super().__init__(f"{classification}: {detail}")


class SchemaMissing(VenturiError):
    """The queue's tables do not exist in this database."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        super().__init__(
            f"table {prefix}jobs does not exist: run `venturi migrate` "
            f"(or `await queue.migrate()`) for prefix {prefix!r}"
        )


class JobFailed(VenturiError):
    """The awaited job went dead: ``reason`` is the note of its ``dead`` journal entry
    (a classification such as ``lease-expired`` or ``dependency-failed``, never
    payload content)."""

    def __init__(self, job_id: UUID, reason: str | None) -> None:
        self.job_id = job_id
        self.reason = reason
        super().__init__(f"job {job_id} failed: {reason or 'no reason recorded'}")


class JobCancelled(VenturiError):
    """The awaited job no longer exists: it was cancelled (or deleted by cleanup or
    retention, or never existed) before it completed or its result was read."""

    def __init__(self, job_id: UUID) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} was cancelled (it no longer exists)")


class DatabaseError(VenturiError):
    """The database failed a statement for a reason that is not transient. ``sqlstate``
    is the server's five-character code when the server answered (a classification,
    safe to log where the message may not be), else None."""

    sqlstate: str | None = None


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached right now (refused, lost, restarting)."""


class DatabaseConflict(DatabaseError):
    """The statement's transaction was rolled back for a reason of timing: it lost a
    race with another one (PostgreSQL detected a deadlock, or a serialization failure),
    waited for a lock longer than ``lock_timeout``, ran longer than
    ``statement_timeout``, or an operator cancelled it. Nothing it did stays, and
    running it again may succeed."""


CONFLICT_PAUSE = 0.05  # seconds before a statement that lost a race is sent again
CONFLICT_ATTEMPTS = 3  # how often such a statement is sent in all before its error stands


def classify(exc: BaseException) -> str:
    """A content-free name for a failure: the exception's type, never its message."""
    cls = type(exc)
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"
