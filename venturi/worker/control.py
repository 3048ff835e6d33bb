"""Messages on ``{prefix}control``: cancel held jobs, drain a worker, re-read kinds.

A cancel names claimed jobs just deleted (docs/concepts/leases.md#cancellation): a
buffered one is let go at once, a running one is stopped and settles nothing; renewal
would find the claim gone anyway, this only makes it immediate. A drain names this
worker, or every worker (``venturi drain``, ``Queue.drain``). A kinds message says
an operator paused, resumed or limited kinds (docs/concepts/flow-control.md): the
worker re-reads them at once in the background, and claims if they changed (a resume
frees work).
"""

from __future__ import annotations

from collections.abc import Callable

from ..logs import get_logger
from ..notices import Cancel, Drain, InvalidNotice, KindsChanged, parse_control
from .held import HeldJobs, HeldState, StopReason
from .identity import Identity

log = get_logger("venturi.worker")


class Control:
    def __init__(self, held: HeldJobs, identity: Identity,
                 request_drain: Callable[[float | None], None],
                 kinds_changed: Callable[[tuple[str, ...]], None] | None = None) -> None:
        self._held = held
        self._identity = identity
        self._request_drain = request_drain
        self._kinds_changed = kinds_changed

    def handle(self, payload: str) -> None:
        # Anyone who can reach the database can send these: a malformed message is
        # logged and dropped, never allowed to stop the worker.
        try:
            message = parse_control(payload)
        except InvalidNotice:
            log.warning("control_message_invalid")
            return
        if isinstance(message, Cancel):
            for id in message.ids:
                held = self._held.by_id.get(id)
                if held is None or held.state is HeldState.SETTLING:
                    continue
                if held.state is HeldState.BUFFERED:
                    log.info("job_cancelled", job_id=str(held.id), kind=held.kind,
                             run_no=held.run_no)
                    self._held.forget(held)
                else:
                    held.stop(StopReason.CANCELLED)
        elif isinstance(message, Drain) and message.worker in (None, self._identity.name):
            self._request_drain(message.grace)
        elif isinstance(message, KindsChanged) and self._kinds_changed is not None:
            self._kinds_changed(message.kinds)
