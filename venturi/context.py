"""What a running task sees of its job: :class:`Context`, the ``ctx`` of ``Task.run``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from . import _codec

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class ResultReader(Protocol):
    """What ``Context.results`` reads: the store's ``dependencies`` and ``results``."""

    async def dependencies(self, id: UUID) -> list[UUID]: ...

    async def results(self, ids: Sequence[UUID]) -> dict[UUID, Any]: ...


class Context:
    """What a running task sees of its job: identity, carry, attachment, state.

    ``job_id`` and ``kind`` name the job; ``run_no`` is this run's number (1 on
    the first run, the claim epoch); ``state`` is the value of the worker's
    ``lifespan`` (None without one); ``span`` is the run's OpenTelemetry span, or
    None when nothing traces the worker.
    """

    __slots__ = ("_attachment", "_carry", "_reader", "_result", "_result_limit", "job_id",
                 "kind", "run_no", "span", "state")

    def __init__(self, *, job_id: UUID, kind: str, run_no: int, carry: Any, state: Any,
                 span: Span | None = None,
                 result_limit: int = _codec.DEFAULT_MAX_PAYLOAD_BYTES,
                 reader: ResultReader | None = None) -> None:
        self.job_id = job_id
        self.kind = kind
        self.run_no = run_no
        self.state = state
        #: This run's OpenTelemetry span, current while the task runs; None when
        #: nothing traces the worker (docs/operations/tracing.md).
        self.span = span
        self._carry = carry
        self._attachment: dict[str, Any] | None = None
        self._result: str | None = None  # JSON text
        self._result_limit = result_limit
        self._reader = reader  # the store, for results()

    @property
    def carry(self) -> Any:
        """State carried between runs (None when empty); assign to change it."""
        return self._carry

    @carry.setter
    def carry(self, value: Any) -> None:
        self._carry = value

    def attach(self, **values: Any) -> None:
        """Add structured evidence to this run's journal entry."""
        if self._attachment is None:
            self._attachment = {}
        self._attachment.update(values)

    @property
    def attachment(self) -> dict[str, Any] | None:
        """What ``attach`` collected so far (None when nothing was attached)."""
        return self._attachment

    def set_result(self, value: Any) -> None:
        """The job's result, stored when this run completes it and returned by
        ``queue.result(job_id)`` (docs/concepts/results.md). JSON-encodable and at
        most the queue's payload limit: anything else raises ``InvalidJob`` here, in
        the handler (a failed run, retried as any exception is). A later call
        replaces an earlier one; a run that does not complete stores nothing."""
        text = _codec.dumps(value, "result")
        _codec.check_size(text, self._result_limit, "result")
        self._result = text

    async def results(self, ids: Sequence[UUID] | None = None) -> dict[UUID, Any]:
        """The results of the jobs ``ids`` that completed, by id; by default of the jobs
        this one was enqueued after (``after=``: docs/concepts/workflows.md). A job
        that did not complete (it failed, with ``after_failure="run"``) is absent."""
        if self._reader is None:
            raise RuntimeError("ctx.results() needs the worker's store (a Context of a worker)")
        wanted = list(await self._reader.dependencies(self.job_id) if ids is None else ids)
        return await self._reader.results(wanted)

    @property
    def result_json(self) -> str | None:
        """The result set so far, as JSON text (None when none was set)."""
        return self._result
