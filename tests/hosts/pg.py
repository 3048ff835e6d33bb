"""A private PostgreSQL cluster running on a test host (inside its network namespace),
and a streaming standby of it built with ``pg_basebackup``.

The server listens on the host's own address (port 5432: the namespace has its own
ports) and on a unix socket in the cluster's directory, through which the test itself
reads and checks the database from outside the test network. Like
tests/faults_cluster.py it runs as the ``postgres`` OS user, with durability off except
where a test needs it: a primary with a synchronous standby must flush its commits, or
"acknowledged" would promise nothing.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..faults_cluster import OS_USER, PG_BIN
from .netns import SUBNET, Network

PORT = 5432


class HostCluster:
    """One cluster on ``host``; ``start()``, ``stop()``, ``promote()``, ``destroy()``."""

    def __init__(self, net: Network, host: str, *, standby_of: HostCluster | None = None,
                 synchronous: bool = False) -> None:
        self.net, self.host = net, host
        self.root = Path(tempfile.mkdtemp(prefix=f"venturi-pg-{host}-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.synchronous = synchronous
        user = pwd.getpwnam(OS_USER)
        os.chown(self.root, user.pw_uid, user.pw_gid)
        if standby_of is None:
            self._run("initdb", "-D", str(self.data), "-U", "root", "-A", "trust", "-E", "UTF8",
                      "--locale", "C", "--no-sync")
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {SUBNET}.0/24 trust\n"
                          f"host replication all {SUBNET}.0/24 trust\n")
        else:
            # Over the test network, from the standby's host: -R writes standby.signal and
            # primary_conninfo (application_name defaults to walreceiver; the primary's
            # synchronous_standby_names '*' matches it).
            self._run("pg_basebackup", "-h", standby_of.address, "-p", str(PORT), "-U", "root",
                      "-D", str(self.data), "-R", "-X", "stream", "-c", "fast", "--no-sync",
                      netns=True)

    @property
    def address(self) -> str:
        return self.net.address(self.host)

    @property
    def hostport(self) -> str:
        return f"{self.address}:{PORT}"

    @property
    def local_dsn(self) -> str:
        """Through the unix socket: for the test's own reads and checks."""
        return f"postgresql://root@/postgres?host={self.root}&port={PORT}"

    def _run(self, tool: str, *args: str, check: bool = True,
             netns: bool = False) -> subprocess.CompletedProcess[str]:
        argv = ["runuser", "-u", OS_USER, "--", str(PG_BIN / tool), *args]
        return subprocess.run(self.net.exec(self.host, argv) if netns else argv,
                              capture_output=True, text=True, check=check, timeout=180,
                              cwd=self.root)

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "90", *args, check=check,
                         netns=True)

    def start(self) -> None:
        options = [f"-p {PORT}", f"-c listen_addresses={self.address}", f"-k {self.root}",
                   "-c max_connections=200", "-c full_page_writes=off",
                   "-c wal_level=replica", "-c max_wal_senders=5", "-c hot_standby=on"]
        if self.synchronous:
            # Commits flushed here; the standby is named once it streams (require_standby).
            options += ["-c synchronous_commit=on"]
        else:
            options += ["-c fsync=off", "-c synchronous_commit=off"]
        self._ctl("-l", str(self.log), "-o", " ".join(options), "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def promote(self) -> None:
        self._ctl("promote")

    def running(self) -> bool:
        return self._ctl("status", check=False).returncode == 0

    def destroy(self) -> None:
        if self.data.exists() and self.running():
            self._ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""
