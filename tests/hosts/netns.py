"""Test hosts as network namespaces: one per host, all plugged into a bridge that lives
in a namespace of its own (the switch), so nothing is added to the machine's own network.

Each host has one interface, ``eth0``, with an address in ``10.213.0.0/24`` that exists
only inside that host's namespace; the other end of its veth pair is a port of the switch.
``cut(host)`` takes that port down (the host's NIC loses carrier, as when its cable is
pulled or its switch port fails; the processes on the host keep running) and
``heal(host)`` brings it back. Unix sockets are not namespaced, so the test itself reaches
a database host's PostgreSQL through its socket directory, never over these links.

Namespaces are named ``venturi-{pid}-{tag}-{host}``; ``sweep()`` removes the ones a dead
test process left behind (a SIGKILLed pytest runs no finalizers).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Sequence

SUBNET = "10.213.0"
_NAME = re.compile(r"^venturi-(\d+)-[0-9a-f]+-")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable_reason() -> str | None:
    """Why this machine cannot make test hosts, or None. Tries the real thing: a
    namespace, a veth pair and a bridge, removed again."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    probe = f"venturi-{os.getpid()}-{secrets.token_hex(2)}-probe"
    try:
        for args, what in ((("netns", "add", probe), "ip netns add"),
                           (("-n", probe, "link", "add", "br0", "type", "bridge"),
                            "a bridge (ip link add type bridge)"),
                           (("-n", probe, "link", "add", "va", "type", "veth", "peer", "vb"),
                            "a veth pair (ip link add type veth)")):
            done = _ip(*args, check=False)
            if done.returncode != 0:
                return f"{what} failed: {done.stderr.strip() or done.returncode}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def sweep() -> None:
    """Delete namespaces of test processes that no longer exist."""
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    for line in listed:
        name = line.split(" ")[0]
        match = _NAME.match(name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            _ip("netns", "del", name, check=False)


class Network:
    """Hosts on one switch. ``Network(["db", "w1", "w2"])``; ``create()``, ``destroy()``."""

    def __init__(self, hosts: Sequence[str]) -> None:
        if len(set(hosts)) != len(hosts) or not 0 < len(hosts) < 250:
            raise ValueError("host names must be unique, at most 249 of them")
        self.tag = f"{os.getpid()}-{secrets.token_hex(2)}"
        self.hosts = list(hosts)
        self.switch = f"venturi-{self.tag}-switch"
        self._address = {h: f"{SUBNET}.{i + 1}" for i, h in enumerate(self.hosts)}
        short = secrets.token_hex(2)
        self._port = {h: f"vh{short}p{i}" for i, h in enumerate(self.hosts)}  # <= 15 chars
        self._made: list[str] = []

    def ns(self, host: str) -> str:
        return f"venturi-{self.tag}-{host}"

    def address(self, host: str) -> str:
        return self._address[host]

    def create(self) -> None:
        try:
            self._add_ns(self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for host in self.hosts:
                ns, port = self.ns(host), self._port[host]
                self._add_ns(ns)
                # Made inside the host's namespace, so the machine's own never sees it.
                _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port)
                _ip("-n", ns, "link", "set", port, "netns", self.switch)
                _ip("-n", self.switch, "link", "set", port, "master", "br0")
                _ip("-n", self.switch, "link", "set", port, "up")
                _ip("-n", ns, "addr", "add", f"{self._address[host]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.destroy()
            raise

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)

    def exec(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run on ``host`` (inside its namespace; the pid stays the program's)."""
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def cut(self, host: str) -> None:
        """Partition ``host``: its switch port goes down, its processes keep running."""
        _ip("-n", self.switch, "link", "set", self._port[host], "down")

    def heal(self, host: str) -> None:
        _ip("-n", self.switch, "link", "set", self._port[host], "up")

    def vanish(self, host: str) -> None:
        """``host`` disappears without a trace: every other host keeps its link-layer
        address (so nobody is told it is unreachable) and its switch port goes down, so
        whatever is sent to it is silently dropped, as on a routed network when a machine
        dies. A connection attempt to it hangs until its timeout."""
        shown = _ip("-n", self.ns(host), "-o", "link", "show", "eth0").stdout
        mac = shown.split("link/ether ", 1)[1].split()[0]
        for other in self.hosts:
            if other != host:
                _ip("-n", self.ns(other), "neigh", "replace", self._address[host], "lladdr",
                    mac, "dev", "eth0", "nud", "permanent")
        self.cut(host)

    def destroy(self) -> None:
        """Delete every namespace made (their veth pairs go with them)."""
        while self._made:
            _ip("netns", "del", self._made.pop(), check=False)
