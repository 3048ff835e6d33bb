"""``/healthz``, ``/readyz`` and ``/metrics`` for a worker (``--http HOST:PORT``).

A deliberately small HTTP/1.0 server on asyncio streams: probes and scrapes
only, so no web framework joins the worker's dependencies.
"""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ..config import parse_address
from ..logs import get_logger
from .health import Health

log = get_logger("venturi.worker")


class HealthServer:
    """Serves ``health`` to probes and ``registry`` to scrapers."""

    def __init__(self, health: Health, registry: CollectorRegistry, address: str) -> None:
        self._health = health
        self._registry = registry
        self.host, self.port = parse_address(address)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        for sock in self._server.sockets:
            self.port = int(sock.getsockname()[1])  # the real port when 0 was asked
            break
        log.info("http_listening", host=self.host, port=self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass  # headers are not needed
            parts = request.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
            status, ctype, body = self._route(parts[0] if parts else "", path)
            head = (f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _route(self, method: str, path: str) -> tuple[str, str, bytes]:
        health = self._health
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"method not allowed\n"
        if path == "/healthz":
            ok = health.alive
            return ("200 OK" if ok else "503 Service Unavailable", "text/plain",
                    b"ok\n" if ok else b"not alive\n")
        if path == "/readyz":
            if health.ready:
                return "200 OK", "text/plain", b"ready\n"
            reasons = [name for name, bad in (
                ("database unreachable", not health.db_ok),
                ("listen inactive", not health.listening),
                ("draining", health.draining),
                ("not running", not health.alive)) if bad]
            return "503 Service Unavailable", "text/plain", ("; ".join(reasons) + "\n").encode()
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self._registry)
        return "404 Not Found", "text/plain", b"not found\n"
