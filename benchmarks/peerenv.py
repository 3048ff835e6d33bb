"""The peers (PgQueuer, oban) for the ``peers`` scenario: venvs of their own, a database
each, and their consumers in processes of their own.

The peers are no dependency of venturi: each is installed from its pinned requirements
(``benchmarks/peers/requirements-*.txt``) into a venv under ``$VENTURI_PEERS_VENV``
(default ``.venv-peers/`` in the checkout, gitignored), built when missing or when its
requirements changed — at ``--size full``, or at any size with ``VENTURI_PEERS_BUILD=1``;
otherwise (CI's quick run, the tests) an existing venv is reused or the peer is skipped
with one line saying why. PgQueuer's venv runs on the interpreter venturi runs on; oban
needs Python >= 3.12, found as ``$VENTURI_PEERS_OBAN_PYTHON``, ``python3.13``/``python3.12``
on the PATH, or a pyenv install.

Each peer gets a database of its own on the benchmark's server, created here, its schema
installed by the peer's own installer (``pgq install``, ``oban install``), dropped
afterwards. The child processes speak the line protocol of ``benchmarks/peers/_proto.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "benchmarks" / "peers"
BUILD_SECONDS = 900


@dataclass(frozen=True)
class Peer:
    """One peer: its package, its child script and how its schema is installed."""

    name: str  # as the figures name it
    package: str  # its distribution, for the version
    script: str  # in benchmarks/peers/
    requirements: str  # in benchmarks/peers/
    min_python: tuple[int, int]

    def install_command(self, venv: Path, dsn: str) -> list[str]:
        if self.package == "pgqueuer":
            return [str(venv / "bin" / "pgq"), "--pg-dsn", dsn, "install"]
        return [str(venv / "bin" / "oban"), "install", "--dsn", dsn]


PGQUEUER = Peer("PgQueuer", "pgqueuer", "pgqueuer_child.py", "requirements-pgqueuer.txt",
                (3, 10))
OBAN = Peer("oban", "oban", "oban_child.py", "requirements-oban.txt", (3, 12))
PEERS = (PGQUEUER, OBAN)


@dataclass(frozen=True)
class Ready:
    """A peer whose venv is built: where, and what it runs."""

    peer: Peer
    venv: Path
    version: str  # the peer's
    python: str  # the venv's interpreter version

    @property
    def label(self) -> str:
        return f"{self.peer.name} {self.version}"


def venvs_root() -> Path:
    return Path(os.environ.get("VENTURI_PEERS_VENV") or ROOT / ".venv-peers")


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    major, minor = out.split()
    return int(major), int(minor)


def _interpreter(peer: Peer) -> str | None:
    """An interpreter new enough for ``peer``: venturi's own when it is."""
    if sys.version_info[:2] >= peer.min_python:
        return sys.executable  # ``-m venv`` from a venv builds on its base interpreter
    candidates = [os.environ.get("VENTURI_PEERS_OBAN_PYTHON", "")]
    newest_first = range(20, peer.min_python[1] - 1, -1)
    candidates += [shutil.which(f"python3.{m}") or "" for m in newest_first]
    candidates += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.*/bin/python3")),
                         reverse=True)
    for python in filter(None, candidates):
        version = _python_version(python)
        if version is not None and version >= peer.min_python:
            return python
    return None


def _stamp(peer: Peer) -> str:
    return (SCRIPTS / peer.requirements).read_text(encoding="utf-8")


async def _run(*argv: str, limit: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, f"timed out after {limit:.0f} s"
    return proc.returncode or 0, out.decode(errors="replace")


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    return lines[-1].strip() if lines else "(no output)"


async def prepare(peer: Peer, *, build: bool) -> Ready | str:
    """``peer``'s venv, built if ``build`` allows and it is missing or stale; or the one
    line that says why the peer is skipped."""
    venv = venvs_root() / peer.package
    stamp = venv / "requirements.txt"
    current = stamp.exists() and stamp.read_text(encoding="utf-8") == _stamp(peer)
    if not current:
        if not build:
            return (f"{peer.name} skipped: no venv built from benchmarks/peers/"
                    f"{peer.requirements} at {venv} (built at --size full, or with "
                    "VENTURI_PEERS_BUILD=1)")
        python = _interpreter(peer)
        if python is None:
            return (f"{peer.name} skipped: it needs Python >= "
                    f"{'.'.join(map(str, peer.min_python))} and none was found "
                    "(set VENTURI_PEERS_OBAN_PYTHON)")
        print(f"   building {venv} for {peer.name} with {python} ...", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        code, out = await _run(python, "-m", "venv", str(venv), limit=120)
        if code == 0:
            code, out = await _run(str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                   "-r", str(SCRIPTS / peer.requirements),
                                   limit=BUILD_SECONDS)
        if code != 0:
            shutil.rmtree(venv, ignore_errors=True)
            return f"{peer.name} skipped: its venv could not be built: {_last_line(out)}"
        stamp.write_text(_stamp(peer), encoding="utf-8")
    code, out = await _run(
        str(venv / "bin" / "python"), "-c",
        "import importlib.metadata as m, json, platform; "
        f"print(json.dumps([m.version({peer.package!r}), platform.python_version()]))",
        limit=60)
    if code != 0:
        return f"{peer.name} skipped: its venv at {venv} does not run: {_last_line(out)}"
    version, python_version = json.loads(out.strip().splitlines()[-1])
    return Ready(peer, venv, version, python_version)


def _with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


@contextlib.asynccontextmanager
async def database(dsn: str, ready: Ready) -> AsyncIterator[str]:
    """A database of the peer's own, its schema installed by the peer's installer;
    dropped afterwards whatever happens. Yields its DSN."""
    name = f"venturi_peers_{ready.peer.package}_{secrets.token_hex(3)}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        try:
            peer_dsn = _with_database(dsn, name)
            code, out = await _run(*ready.peer.install_command(ready.venv, peer_dsn), limit=120)
            if code != 0:
                raise RuntimeError(f"{ready.peer.name}'s installer failed: {_last_line(out)}")
            yield peer_dsn
        finally:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


class PeerChild:
    """One peer consumer process (``benchmarks/peers/<peer>_child.py``)."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc, self.name = proc, name

    @classmethod
    async def start(cls, ready: Ready, dsn: str, concurrency: int, *options: str) -> PeerChild:
        proc = await asyncio.create_subprocess_exec(
            str(ready.venv / "bin" / "python"), str(SCRIPTS / ready.peer.script), dsn,
            str(concurrency), *options, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, cwd=SCRIPTS,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        child = cls(proc, ready.peer.name)
        await child.expect("ready")
        return child

    async def read(self) -> str:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 600)
        return line.decode().strip()

    async def expect(self, word: str) -> str:
        line = await self.read()
        if line.split(" ", 1)[0] != word:
            raise RuntimeError(f"{self.name} child: expected {word!r}, got {line!r}")
        return line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    async def ask(self, line: str) -> dict[str, float]:
        """Send a command answered by ``done {json}``; its result."""
        self.send(line)
        result: dict[str, float] = json.loads((await self.expect("done"))[5:])
        return result

    async def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send("exit")
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


@contextlib.asynccontextmanager
async def child(ready: Ready, dsn: str, concurrency: int,
                *options: str) -> AsyncIterator[PeerChild]:
    c = await PeerChild.start(ready, dsn, concurrency, *options)
    try:
        yield c
    finally:
        await c.close()


async def drain(ready: Ready, dsn: str, jobs: int, concurrency: int, *options: str) -> float:
    """One timed drain: a fresh consumer process, connected, its tables emptied and
    filled with ``jobs`` (untimed); then "go" to the last job done. ``options`` go to
    the child's command line."""
    async with child(ready, dsn, concurrency, *options) as c:
        c.send(f"fill {jobs}")
        await c.expect("filled")
        result = await c.ask("go")
    if result["jobs"] != jobs or result.get("left"):
        raise RuntimeError(f"{ready.label}: ran {result['jobs']:.0f} of {jobs} jobs, "
                           f"{result.get('left', 0):.0f} left in its table")
    return result["seconds"]


async def enqueue(ready: Ready, dsn: str, jobs: int) -> float:
    """``jobs`` enqueued one call each by the peer's own enqueue, into emptied tables."""
    async with child(ready, dsn, 1) as c:
        return (await c.ask(f"enqueue {jobs}"))["seconds"]


class Pickup:
    """An idle peer consumer (concurrency 10, LISTENing) and a producer, each in a
    process of its own, as venturi's pickup scenario runs its worker: ``started`` maps a
    job's number to when its handler started, ``commit(k)`` enqueues job ``k`` and
    returns when the producer's call returned (``perf_counter``, the host's clock)."""

    def __init__(self, ready: Ready, dsn: str) -> None:
        self.ready, self.dsn = ready, dsn
        self.started: dict[int, float] = {}

    async def __aenter__(self) -> Pickup:
        self.consumer = await PeerChild.start(self.ready, self.dsn, 10)
        self.consumer.send("listen")
        await self.consumer.expect("listening")
        self.producer = await PeerChild.start(self.ready, self.dsn, 10)
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        while (line := await self.consumer.read()).startswith("started "):
            _, k, t = line.split()
            self.started[int(k)] = float(t)

    async def commit(self, k: int) -> float:
        self.producer.send(f"commit {k}")
        return float((await self.producer.expect("committed")).split()[2])

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.close()
        await self.consumer.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
