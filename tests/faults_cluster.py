"""A private PostgreSQL cluster that fault tests may stop, start and restart.

The shared server on 5432 must never be touched, so tests that take the
database away get their own: ``initdb`` into a temporary directory (as user
``postgres``, since PostgreSQL refuses to run as root), on a free port, with
durability off (nothing here needs to survive a crash of the machine).

Use the ``private_pg`` fixture (import it into the test module) and mark the
tests ``@pytest.mark.faults``; it skips with the reason when the binaries or
``runuser`` are missing (under ``CI=true`` it fails instead: tests/ci.py). The
cluster is shared by the session's tests; each test gets it running.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from venturi import Queue
from venturi.store.postgres import PostgresStore

from .ci import unavailable
from .conftest import drop_prefix, new_prefix

PG_BIN = Path(os.environ.get("VENTURI_PG_BIN", "/usr/lib/postgresql/15/bin"))
OS_USER = "postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def unavailable_reason() -> str | None:
    """Why a private cluster cannot be made here, or None."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        return f"no PostgreSQL binaries in {PG_BIN} (set VENTURI_PG_BIN)"
    if shutil.which("runuser") is None:
        return "runuser is not available"
    if os.geteuid() != 0:
        return "runuser needs root to switch to the postgres user"
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        return f"no {OS_USER!r} OS user to run PostgreSQL as"
    return None


class PrivateCluster:
    """One throwaway cluster; ``dsn`` reaches it as superuser ``root`` (trust auth)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="venturi-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.dsn = f"postgresql://root@127.0.0.1:{self.port}/postgres"
        user = pwd.getpwnam(OS_USER)
        os.chown(self.root, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "root", "-A", "trust", "-E", "UTF8",
                  "--locale", "C", "--no-sync")

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", OS_USER, "--", str(PG_BIN / tool), *args],
            capture_output=True, text=True, check=check, timeout=120, cwd=self.root)

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", *args, check=check)

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
                   " -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._ctl("-l", str(self.log), "-o", options, "start")

    def stop(self) -> None:
        self._ctl("-m", "fast", "stop")

    def restart(self) -> None:
        self._ctl("-m", "fast", "-l", str(self.log), "restart")

    def running(self) -> bool:
        return self._ctl("status", check=False).returncode == 0

    def destroy(self) -> None:
        if self.running():
            self._ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


_cluster: PrivateCluster | None = None


@pytest.fixture
def private_pg(request: pytest.FixtureRequest) -> PrivateCluster:
    """A private cluster, running when the test starts; stop and restart it freely.

    One per test session, made on first use and destroyed at the session's end
    (a single fixture, so importing ``private_pg`` into a test module is enough)."""
    global _cluster
    reason = unavailable_reason()
    if reason:
        unavailable(f"private PostgreSQL cluster unavailable: {reason}")
    if _cluster is None:
        cluster = PrivateCluster()
        request.config.add_cleanup(cluster.destroy)
        _cluster = cluster
    if not _cluster.running():
        _cluster.start()
    return _cluster


@asynccontextmanager
async def queue_on(cluster: PrivateCluster, *, max_size: int) -> AsyncIterator[Queue]:
    """A migrated queue of a fresh prefix on ``cluster``; its tables are dropped after,
    if the cluster is up by then (a test may leave it stopped)."""
    prefix = new_prefix()
    store = await PostgresStore.connect(cluster.dsn, prefix=prefix, max_size=max_size)
    await store.migrate()
    try:
        yield Queue(store)
    finally:
        await store.close()
        if cluster.running():
            await drop_prefix(cluster.dsn, prefix)
