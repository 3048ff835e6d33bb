"""A slow and lossy TCP link, in user space: this machine's kernel has no netem qdisc and
no iptables, so the test routes one host's database traffic through this proxy instead.

    python -m tests.hosts.proxy --listen 127.0.0.1:6432 --upstream 10.213.0.1:5432 \
        --delay 0.2 --stall-rate 0.03 --reset-rate 0.02 --storm-every 4 --seed 7 \
        --max-seconds 600

Run on the host itself (``ip netns exec``): its workers connect to the proxy on the
host's loopback, and the proxy to the database host over the host's link. Every byte is
delivered ``delay`` seconds after it arrived, in each direction (so a round trip takes
``2 * delay`` longer), in order and pipelined. Each second, each connection stalls with
probability ``stall-rate`` (one direction stops for 0.5 to 2.5 s, its bytes held) and is
reset with probability ``reset-rate`` (both sockets closed with RST, as when a NAT or a
firewall drops the flow); ``storm-every`` adds faults on a schedule, so that a short run
is sure to see some; with ``--arm-on-signal`` nothing goes wrong until SIGUSR1, so that
the workers behind it boot first (``venturi worker`` does not start without a database).
On SIGTERM, or after ``max-seconds``, it prints one JSON line with what it did and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass


@dataclass
class Stats:
    connections: int = 0
    resets: int = 0
    stalls: int = 0
    bytes: int = 0


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Link:
    """One proxied connection: two directions, each a reader feeding a delayed writer."""

    def __init__(self, args: argparse.Namespace, rng: random.Random, stats: Stats,
                 armed: asyncio.Event) -> None:
        self.args, self.rng, self.stats, self.armed = args, rng, stats, armed
        self.stalled_until = [0.0, 0.0]
        self.resetting = False
        self.reset_now = asyncio.Event()

    async def serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        host, port = _host_port(self.args.upstream)
        try:
            up_r, up_w = await asyncio.open_connection(host, port)
        except OSError:
            _reset(client_w)
            return
        pumps = [asyncio.create_task(self._pump(client_r, up_w, 0)),
                 asyncio.create_task(self._pump(up_r, client_w, 1)),
                 asyncio.create_task(self._chaos())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            for w in (client_w, up_w):
                if self.resetting:
                    _reset(w)
                else:
                    w.close()

    def stall(self, direction: int, seconds: float) -> None:
        self.stats.stalls += 1
        until = asyncio.get_running_loop().time() + seconds
        self.stalled_until[direction] = max(self.stalled_until[direction], until)

    async def _chaos(self) -> None:
        await self.armed.wait()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.reset_now.wait(), 1.0)
            if self.reset_now.is_set() or self.rng.random() < self.args.reset_rate:
                self.stats.resets += 1
                self.resetting = True
                return  # ends serve(): both sides are reset
            if self.rng.random() < self.args.stall_rate:
                self.stall(self.rng.randrange(2), self.rng.uniform(0.5, 2.5))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    direction: int) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                arrived, data = await queue.get()
                while True:
                    wait = max(arrived + self.args.delay, self.stalled_until[direction])
                    wait -= loop.time()
                    if wait <= 0:
                        break
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
                queue.task_done()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    await queue.join()  # what was sent before the close arrives too
                    return
                self.stats.bytes += len(data)
                queue.put_nowait((loop.time(), data))
                if sender.done():
                    return
        except OSError:
            return
        finally:
            sender.cancel()


async def main_async(args: argparse.Namespace) -> Stats:
    stats = Stats()
    rng = random.Random(args.seed)
    host, port = _host_port(args.listen)
    links: set[Link] = set()
    armed = asyncio.Event()
    if not args.arm_on_signal:
        armed.set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = Link(args, rng, stats, armed)
        links.add(link)
        try:
            await link.serve(reader, writer)
        finally:
            links.discard(link)

    async def storms() -> None:
        """Besides the random faults, every ``storm-every`` seconds: every connection
        stalls for 1.5 s, and half a period later one of them is reset."""
        await armed.wait()
        while True:
            await asyncio.sleep(args.storm_every / 2)
            for link in list(links):
                link.stall(rng.randrange(2), 1.5)
            await asyncio.sleep(args.storm_every / 2)
            if links:
                rng.choice(sorted(links, key=id)).reset_now.set()

    server = await asyncio.start_server(serve, host, port, reuse_address=True)
    storm = asyncio.create_task(storms()) if args.storm_every > 0 else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, armed.set)
    print(json.dumps({"event": "proxy_listening", "listen": args.listen}), flush=True)
    began = time.monotonic()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), args.max_seconds - (time.monotonic() - began))
    if storm is not None:
        storm.cancel()
    server.close()
    return stats


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tests.hosts.proxy")
    p.add_argument("--listen", required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--delay", type=float, default=0.2)
    p.add_argument("--stall-rate", type=float, default=0.0)
    p.add_argument("--reset-rate", type=float, default=0.0)
    p.add_argument("--storm-every", type=float, default=0.0)
    p.add_argument("--arm-on-signal", action="store_true",
                   help="no faults until SIGUSR1 (once the workers have booted)")
    p.add_argument("--seed", type=int)
    p.add_argument("--max-seconds", type=float, default=600.0)
    args = p.parse_args(argv)
    stats = asyncio.run(main_async(args))
    print(json.dumps({"event": "proxy_stopped", **asdict(stats)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
