"""A worker whose database is far away: the drain scenario's worker through a delaying link.

``python -m benchmarks.remote_probe [--delay 0.025] [--jobs 5000] [--rounds 2]
[--concurrency 50] [--dsn DSN]``: starts ``tests/hosts/proxy.py`` (a user-space TCP
proxy that delivers every byte ``delay`` seconds after it arrived, each way: a round
trip ``2 × delay`` longer), fills N no-op jobs directly, and drains them with one
in-process ``Worker(concurrency=C).run(until_empty=True)`` (library defaults) connected
through the proxy. Prints jobs/s, how many claims took rows and their mean size: what the
prefetch window does when a claim's round trip is longer than its 20 ms bound
(venturi/worker/prefetch.py, ``SLOW_TRIP_BOUND``). To compare two trees, run each with
``PYTHONPATH=<tree>`` from inside that tree (``python -m`` puts the current directory
first on ``sys.path``). Not a page figure: the proxy is Python and costs CPU of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from venturi import Queue, Worker
from venturi.worker import claimer

from .harness import DEFAULT_DSN, fresh_prefix, truncate
from .scenarios.worker import fill, quiet_logs
from .tasks import KIND, Noop

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _until_open(port: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("the proxy did not start") from None
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return


async def main(args: argparse.Namespace) -> None:
    url = urlsplit(args.dsn)
    port = _free_port()
    proxy = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.hosts.proxy", "--listen", f"127.0.0.1:{port}",
        "--upstream", f"{url.hostname}:{url.port or 5432}", "--delay", str(args.delay),
        cwd=ROOT, stdout=asyncio.subprocess.DEVNULL)
    userinfo, at, _ = url.netloc.rpartition("@")
    far = urlunsplit(url._replace(netloc=f"{userinfo}{at}127.0.0.1:{port}"))
    sizes: list[int] = []
    real = claimer.Claimer._claim

    async def counted(self: Any, free: int) -> Any:
        jobs, more = await real(self, free)
        sizes.append(len(jobs))
        return jobs, more

    claimer.Claimer._claim = counted  # type: ignore[method-assign]
    try:
        await _until_open(port)
        async with fresh_prefix(args.dsn) as prefix, Queue.connect(far, prefix=prefix) as queue:
            conn = await asyncpg.connect(args.dsn)
            try:
                for _ in range(args.rounds):
                    await truncate(conn, prefix)
                    await fill(conn, prefix, args.jobs, KIND)
                    sizes.clear()
                    with quiet_logs():
                        start = time.perf_counter()
                        await Worker(queue, tasks=[Noop], concurrency=args.concurrency
                                     ).run(until_empty=True)
                        seconds = time.perf_counter() - start
                    full = [n for n in sizes if n]
                    print(f"delay {args.delay * 1000:.0f} ms each way: "
                          f"{args.jobs / seconds:,.0f} jobs/s, {len(full)} claims with rows, "
                          f"{sum(full) / max(len(full), 1):.0f} rows each", flush=True)
            finally:
                await conn.close()
    finally:
        claimer.Claimer._claim = real  # type: ignore[method-assign]
        proxy.terminate()
        await proxy.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.025)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    asyncio.run(main(parser.parse_args()))
