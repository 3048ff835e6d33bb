"""SIGTERM and SIGINT for a process that runs a worker (``handle_signals=True``).

The first signal drains the worker, the second stops it now (exit 130;
docs/operations/deploys.md). Signals belong to the process, not to a worker, so
one :data:`STOP_SIGNALS` records them for the whole process. ``venturi worker``
takes them first thing, for as long as the command runs: a signal at any later
moment of its start (while the application imports, while the queue connects,
while the worker boots) is kept and handled as soon as something listens,
instead of ending the process with Python's default handler. A library user's
``Worker.run()`` takes them for the run only; the previous handlers are put back
afterwards.

The handler only records the signal and schedules the listeners on their event
loop: it can interrupt any bytecode, so it changes no state itself.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    import anyio

SIGNALS = (signal.SIGTERM, signal.SIGINT)

Listener = Callable[[int], None]


class StopSignals:
    def __init__(self) -> None:
        self.received: list[int] = []  # since install(), oldest first
        self._listeners: list[tuple[asyncio.AbstractEventLoop, Listener]] = []
        self._previous: dict[int, Any] | None = None

    @property
    def installed(self) -> bool:
        return self._previous is not None

    def install(self) -> None:
        """Take SIGTERM and SIGINT over (from the main thread). Idempotent."""
        if self._previous is not None:
            return
        self._previous = {s: signal.getsignal(s) for s in SIGNALS}
        for s in SIGNALS:
            signal.signal(s, self._handle)

    def uninstall(self) -> None:
        """Give the signals back to whatever handled them before, and forget them."""
        previous, self._previous = self._previous, None
        if previous is not None:
            for s, handler in previous.items():
                signal.signal(s, handler)
        self.received.clear()

    def release(self) -> None:
        """Give the signals back, and deliver again to their own handlers the ones that
        arrived meanwhile: for a command that turns out not to run a worker."""
        pending = list(self.received)
        self.uninstall()
        for signum in pending:
            signal.raise_signal(signum)

    def _handle(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        for loop, listener in list(self._listeners):
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(listener, signum)

    @contextlib.contextmanager
    def taken(self) -> Iterator[None]:
        """The signals are this object's for the block (unless they already were)."""
        own = not self.installed
        if own:
            self.install()
        try:
            yield
        finally:
            if own:
                self.uninstall()

    @contextlib.contextmanager
    def listening(self, listener: Listener) -> Iterator[None]:
        """Call ``listener(signum)`` on the running loop for each signal, those received
        before first. Takes the signals for the block if nobody did."""
        import asyncio  # here, not at the top: the command imports this module first thing

        entry = (asyncio.get_running_loop(), listener)
        with self.taken():
            self._listeners.append(entry)
            try:
                for signum in list(self.received):
                    listener(signum)
                yield
            finally:
                self._listeners.remove(entry)

    @contextlib.contextmanager
    def cancelling(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope that the first signal (already received or to come) cancels:
        for a wait nothing else could interrupt, such as connecting."""
        import anyio

        with anyio.CancelScope() as scope, self.listening(lambda _signum: scope.cancel()):
            yield scope


STOP_SIGNALS = StopSignals()
