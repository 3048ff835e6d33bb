"""``venturi worker`` started while its database is unreachable waits for it, the way a
running worker rides out an outage, instead of exiting 1: a pod scheduled during a
failover or a restart must come up by itself (docs/operations/deploys.md)."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.cli_app_tasks import Echo
from venturi import Queue, Status

from ..conftest import wait_for
from .test_worker_signals import pgq, start, untouched  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def relay(port: int, to: tuple[str, int]) -> AsyncIterator[None]:
    """From now on ``port`` forwards to the real server: the database 'comes back'."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    tasks: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*to)
        for t in (pipe(reader, up_writer), pipe(up_reader, writer)):
            task = asyncio.create_task(t)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(on_connect, "127.0.0.1", port, reuse_address=True)
    try:
        yield
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()


async def test_a_worker_started_before_its_database_waits_for_it(
        pgq: Queue, start: Any, pg_dsn: str) -> None:  # noqa: F811
    job = await pgq.enqueue(Echo(uri="file:///later"))
    port = _free_port()  # nothing listens there yet: connections are refused
    proc = start(dsn=f"postgresql://root@127.0.0.1:{port}/test")
    await wait_for(lambda: proc.alive() and proc.logged("db_unavailable", service="connect"),
                   timeout=30, what="the worker to find its database unreachable")
    await untouched(pgq, job.id)
    async with relay(port, ("127.0.0.1", 5432)):
        async def done() -> bool:
            row = await pgq.job(job.id)
            return row is not None and row.status is Status.COMPLETED
        await wait_for(done, timeout=60, what="the job, once the database answers")
        assert proc.logged("db_available", service="connect")
        proc.popen.send_signal(signal.SIGTERM)
        assert await proc.exit_code() == 0
    assert [e.get("event") for e in proc.events()].count("db_unavailable") == 1


async def test_signalled_while_it_waits_for_an_unreachable_database(
        pgq: Queue, start: Any) -> None:  # noqa: F811
    job = await pgq.enqueue(Echo(uri="file:///never"))
    proc = start(dsn=f"postgresql://root@127.0.0.1:{_free_port()}/test")
    await wait_for(lambda: proc.alive() and proc.logged("db_unavailable", service="connect"),
                   timeout=30, what="the worker to wait for its database")
    proc.popen.send_signal(signal.SIGTERM)
    assert await proc.exit_code() == 0
    assert proc.logged("worker_not_started")
    await untouched(pgq, job.id)
