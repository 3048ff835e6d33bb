"""Serving an app with uvicorn: ``venturi web`` does, and so does a worker's ``--http``.

The socket is bound here, before uvicorn starts, so an address in use is one
clear error instead of uvicorn's exit. Event streams never end by themselves
and uvicorn waits for open requests before it stops, so the server tells the
dashboard to end its streams as soon as a shutdown begins. A signal stops it
cleanly, without uvicorn re-raising the signal afterwards.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from venturi.config import parse_address
from venturi.errors import ConfigError

GRACE = 5.0  # seconds uvicorn waits for requests still open at shutdown


def bind(address: str) -> socket.socket:
    """A listening socket on ``address``; ``ConfigError`` naming it when that fails."""
    host, port = parse_address(address, example="127.0.0.1:8080")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"--http {address!r}: cannot resolve {host!r} ({exc.strerror})") from None
    family, kind, proto, _, where = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--http {address!r}: cannot listen there ({exc.strerror})") from None
    sock.setblocking(False)
    return sock


class Server(uvicorn.Server):
    """uvicorn on a socket of ours, ending the dashboard's streams at shutdown.

    ``signals=False`` leaves the process's signal handlers alone (a worker serving
    its probes handles SIGTERM itself); stop it with ``should_exit = True``.
    """

    def __init__(self, app: ASGIApp, *, signals: bool = True, **options: Any) -> None:
        options.setdefault("log_config", None)  # the process's logging, not uvicorn's
        options.setdefault("access_log", False)
        options.setdefault("timeout_graceful_shutdown", GRACE)
        options.setdefault("lifespan", "on")
        super().__init__(uvicorn.Config(app, **options))
        self.app = app
        self.signals = signals

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        dashboard = getattr(getattr(self.app, "state", None), "dashboard", None)
        if dashboard is not None:
            dashboard.hub.close_streams()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if not self.signals or threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self.force_exit = True  # a second signal: stop waiting for open requests
        self.should_exit = True


def port_of(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])
