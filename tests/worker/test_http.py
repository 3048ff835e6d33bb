"""/healthz, /readyz and /metrics of a running worker."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

import venturi
from tests.conftest import wait_for
from venturi import Queue
from venturi.store.postgres import PostgresStore

pytestmark = pytest.mark.timeout(60)
GATE = asyncio.Event()


class Gated(venturi.Task, kind="http.gated"):
    async def run(self, ctx: venturi.Context) -> None:
        await GATE.wait()


class Quick(venturi.Task, kind="http.quick"):
    async def run(self, ctx: venturi.Context) -> None:
        return None


async def get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


async def test_probes_flip_when_draining_and_counters_move(
        pg_store_dbclock: PostgresStore) -> None:
    GATE.clear()
    queue = Queue(pg_store_dbclock)
    worker = venturi.Worker(queue, tasks=[Gated, Quick], concurrency=2, http="127.0.0.1:0",
                            sample_interval=0.1)
    runner = asyncio.create_task(worker.run())
    await wait_for(lambda: worker.health.ready, what="worker ready")
    assert worker.http is not None
    port = worker.http.port
    assert (await get(port, "/healthz"))[0] == 200
    assert (await get(port, "/readyz"))[0] == 200
    assert (await get(port, "/nope"))[0] == 404

    for _ in range(3):
        await queue.enqueue(Quick())
    await queue.enqueue(Gated())

    async def completed() -> bool:
        _, body = await get(port, "/metrics")
        done = samples(body, "venturi_jobs_completed_total")
        claimed = samples(body, "venturi_jobs_claimed_total")
        return (done.get((("kind", "http.quick"),), 0) == 3
                and claimed.get((("kind", "http.gated"),), 0) == 1)
    await wait_for(completed, what="3 quick jobs counted and the gated one claimed")
    _, body = await get(port, "/metrics")
    assert samples(body, "venturi_jobs_claimed_total")[(("kind", "http.gated"),)] == 1
    assert samples(body, "venturi_jobs_in_flight") == {(): 1}
    assert samples(body, "venturi_job_pickup_seconds_count")[(("kind", "http.quick"),)] == 3

    worker.request_drain(10)
    status, reason = await get(port, "/readyz")
    assert status == 503 and "draining" in reason
    assert (await get(port, "/healthz"))[0] == 200  # alive while draining
    GATE.set()
    await asyncio.wait_for(runner, 20)
    assert worker.exit_code == 0


async def test_a_cancelled_close_is_cancelled_and_the_server_still_stops() -> None:
    """HttpServer.close waits for uvicorn to stop; a cancel of its caller meanwhile must
    reach the caller (it was once swallowed with the server's own errors), and the
    shutdown still ends with the server stopped and the socket closed."""
    from prometheus_client import CollectorRegistry

    from venturi.worker.health import Health
    from venturi.worker.http import HttpServer

    server = HttpServer(Queue(venturi.MemoryStore()), Health(), CollectorRegistry(),
                        "127.0.0.1:0")
    await server.start()
    serving = server._task
    assert serving is not None
    closing = asyncio.create_task(server.close())
    # uvicorn looks at should_exit on its tick (every 0.1 s): close() is waiting for it.
    await wait_for(lambda: server._server.should_exit, what="close() to tell the server")
    assert not closing.done() and not serving.done()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    shutdown = server._closing
    assert shutdown is not None
    await wait_for(shutdown.done, what="the shutdown to end")
    assert shutdown.exception() is None and server._sock.fileno() == -1
    assert serving.done() and not serving.cancelled() and serving.exception() is None


async def test_a_shutdown_that_fails_after_its_caller_was_cancelled_is_logged() -> None:
    """The shutdown goes on after close()'s caller was cancelled. If it then fails (the
    dashboard's hub refusing to close, say), the failure is logged as a warning, and
    asyncio has no unretrieved exception to report."""
    import gc

    import structlog
    from prometheus_client import CollectorRegistry

    from venturi.errors import classify
    from venturi.worker.health import Health
    from venturi.worker.http import HttpServer

    server = HttpServer(Queue(venturi.MemoryStore()), Health(), CollectorRegistry(),
                        "127.0.0.1:0")
    await server.start()
    release = asyncio.Event()

    class Hub:  # what _shut_down closes after the server: here it fails, when released
        async def aclose(self) -> None:
            await release.wait()
            raise OSError("the hub would not close")

    server._server.app.state.dashboard = Hub()  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    unretrieved: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        with structlog.testing.capture_logs() as logs:
            closing = asyncio.create_task(server.close())
            await wait_for(lambda: server._task is not None and server._task.done(),
                           what="the server to stop")
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await closing
            release.set()
            shutdown = server._closing
            assert shutdown is not None
            await wait_for(lambda: any(e["event"] == "http_close_failed" for e in logs),
                           what="the failed shutdown to be logged")
            del shutdown, closing
            server._closing = None
            gc.collect()  # an unretrieved exception is reported when its future goes
        failed = [e for e in logs if e["event"] == "http_close_failed"]
        assert len(failed) == 1 and failed[0]["log_level"] == "warning", logs
        assert failed[0]["error"] == classify(OSError()), failed
        assert unretrieved == []
    finally:
        loop.set_exception_handler(None)
