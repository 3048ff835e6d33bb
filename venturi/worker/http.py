"""``/healthz``, ``/readyz`` and ``/metrics`` of a worker (``--http HOST:PORT``), and
with ``dashboard`` the dashboard on the same address.

They are the web stack's applications (``venturi.web``: Starlette, served by
uvicorn) on the worker's own event loop, so they need the ``web`` extra: a worker
asked for HTTP without it refuses to start and names the extra
(docs/operations/containers.md). Signals stay the worker's: uvicorn installs no
handlers here, and a SIGTERM drains the worker while its probes keep answering
(readiness 503 "draining", liveness 200) until ``run()`` returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..config import WEB_EXTRA, require_web
from ..errors import ConfigError, classify
from ..logs import get_logger
from ..queue import Queue
from ..task import Task
from .health import Health

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = get_logger("venturi.worker")

STARTUP_TIMEOUT = 10.0
__all__ = ["WEB_EXTRA", "HttpServer", "require_web"]


class HttpServer:
    """The worker's web application, served by uvicorn until :meth:`close`."""

    def __init__(self, queue: Queue, health: Health, registry: CollectorRegistry, address: str,
                 *, dashboard: bool = False, read_only: bool = False, auth: Any = None,
                 tasks: Sequence[type[Task]] = ()) -> None:
        require_web()
        from venturi.web import DashboardOptions, create_app, create_probe_app
        from venturi.web.server import Server, bind

        if dashboard:
            app = create_app(queue, auth=auth, read_only=read_only, health=health,
                             metrics=registry, options=DashboardOptions(tasks=list(tasks)))
        else:
            app = create_probe_app(health=health, metrics=registry)
        self._sock = bind(address)
        self.host, self.port = self._sock.getsockname()[:2]
        self.dashboard = dashboard
        self._server = Server(app, signals=False)
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Future[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]),
                                         name="venturi-worker-http")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STARTUP_TIMEOUT
        while not self._server.started:  # uvicorn says when it serves; the socket is ours
            if self._task.done():
                self._task.result()
                raise ConfigError(f"--http {self.host}:{self.port}: the server did not start")
            if loop.time() > deadline:
                raise ConfigError(f"--http {self.host}:{self.port}: the server did not start "
                                  f"within {STARTUP_TIMEOUT:.0f} s")
            await asyncio.sleep(0.01)
        log.info("http_listening", host=self.host, port=self.port, dashboard=self.dashboard)

    async def close(self) -> None:
        """Stop serving: uvicorn ends its connections and returns (cancelled after
        ``STARTUP_TIMEOUT``), then the dashboard's hub and the socket close. That
        shutdown runs as a task of its own: a cancel of the caller reaches the caller
        (once it was swallowed with the server's own errors) and the shutdown still
        completes."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._shut_down())
        try:
            await asyncio.shield(self._closing)
        except asyncio.CancelledError:
            # Nobody is left to await the shutdown: its failure is logged, not left to
            # asyncio's "exception was never retrieved".
            self._closing.add_done_callback(_log_failure)
            raise

    async def _shut_down(self) -> None:
        self._server.should_exit = True
        task = self._task
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=STARTUP_TIMEOUT)
            if not done:
                task.cancel()
                await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # the server's own, at shutdown: retrieved, not raised
        app_state = getattr(self._server.app, "state", None)
        dash = getattr(app_state, "dashboard", None)
        if dash is not None:
            await dash.aclose()
        self._sock.close()


def _log_failure(shutdown: asyncio.Future[None]) -> None:
    if not shutdown.cancelled() and (exc := shutdown.exception()) is not None:
        log.warning("http_close_failed", error=classify(exc))
