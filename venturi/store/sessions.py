"""The dedicated sessions a store hands out, each with a lifetime of its own: a
:class:`Listener` on the queue's channels (LISTEN), the worker-name
:class:`IdentityLock` (a session advisory lock) and the queue's own vacuum
(:class:`Maintenance`).

``Store.listen``, ``Store.identity_lock`` and ``Store.maintenance`` return them;
each adapter implements them (memory_sessions.py, postgres/asyncpg_sessions.py).
``venturi.store.base`` re-exports them with the rest of the contract.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from .vacuum import MaintenanceState, VacuumPolicy, VacuumRun

__all__ = ["ArrivalHook", "IdentityLock", "Listener", "Maintenance"]


class IdentityLock(abc.ABC):
    """A worker-name lock that outlives transactions (a session advisory lock).

    Use as an async context manager; ``acquire`` tries once. ``lost`` is set
    when the session holding it ends (the database went away).
    """

    lost: Any

    @abc.abstractmethod
    async def __aenter__(self) -> IdentityLock: ...

    @abc.abstractmethod
    async def __aexit__(self, *exc: object) -> None: ...

    @abc.abstractmethod
    async def acquire(self) -> bool:
        """Try to take the lock (again, after a reconnect); whether we hold it."""

    async def ping(self) -> None:  # noqa: B027 - optional hook
        """Round-trip on the lock's session; sets ``lost`` if the session is gone, so a
        silently dead socket is noticed (the default, for in-process locks, does nothing)."""


class Maintenance(abc.ABC):
    """The queue's own vacuum, on a session of its own (a VACUUM cannot run in a
    transaction, and its try-lock is a session lock): docs/operations/maintenance.md.

    Use as an async context manager; ``vacuum`` looks at the queue's tables once and
    vacuums those ``policy`` says are due, unless another worker of the queue is at it.
    A lost session raises ``DatabaseUnavailable``; the next call opens a new one.
    """

    @abc.abstractmethod
    async def __aenter__(self) -> Maintenance: ...

    @abc.abstractmethod
    async def __aexit__(self, *exc: object) -> None: ...

    @abc.abstractmethod
    async def vacuum(self, policy: VacuumPolicy, state: MaintenanceState) -> list[VacuumRun]:
        """The tables looked at and vacuumed (or skipped, with the reason)."""


ArrivalHook = Callable[[str, str], bool]
"""``hook(label, payload)``: whether it handled the notification (then ``receive`` does
not see it)."""


class Listener(abc.ABC):
    """Wake-ups from the store: ``("jobs", kind)`` or ``("control", json)`` (or, from
    ``listen_finished``, ``("finished", ids)``).

    A notification is only a hint; the claim query decides what runs.
    """

    _arrival: ArrivalHook | None = None

    def on_arrival(self, hook: ArrivalHook | None) -> None:
        """Call ``hook(label, payload)`` as each notification arrives, in the
        connection's own callback, before it is queued for ``receive``: what it does
        there (the worker's waker sets the claimer's event) saves a switch to the task
        that reads ``receive``. A notification it returns True for is not queued; one
        it raises for is, so that the reader's own handling meets the error. Not
        blocking, never awaiting. A listener that does not call the hook (this default)
        queues everything."""
        self._arrival = hook

    def _arrived(self, label: str, payload: str) -> bool:
        """For implementations: run the hook; True if it handled the notification."""
        hook = self._arrival
        if hook is None:
            return False
        try:
            return hook(label, payload)
        except Exception:
            return False  # queued: receive()'s reader handles it, and meets the error

    @abc.abstractmethod
    async def __aenter__(self) -> Listener: ...

    @abc.abstractmethod
    async def __aexit__(self, *exc: object) -> None: ...

    @abc.abstractmethod
    async def receive(self) -> tuple[str, str]:
        """The next notification; raises ``DatabaseUnavailable`` when the
        connection drops (the caller reconnects with a fresh listener)."""
