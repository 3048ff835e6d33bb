"""A private PgBouncer in transaction pool mode in front of a PostgreSQL database, for
the pooler tests and benchmarks/pooler.py (Debian's pgbouncer; ``.ci/run`` installs it)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def binary() -> str | None:
    return shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("pgbouncer did not start listening within 15 s")


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@contextmanager
def bouncer(pg_dsn: str, *, pool_size: int = 4) -> Iterator[str]:
    """Run a pgbouncer in transaction mode in front of ``pg_dsn``; yields its DSN."""
    exe = binary()
    if exe is None:
        raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
    target = urlsplit(pg_dsn)
    user = target.username or "root"
    dbname = target.path.lstrip("/") or "test"
    port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="venturi-pgbouncer-"))
    (workdir / "userlist.txt").write_text(f'"{user}" ""\n')
    log = workdir / "pgbouncer.log"
    (workdir / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{dbname} = host={target.hostname or '127.0.0.1'} port={target.port or 5432}"
        f" dbname={dbname}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'userlist.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 100\n"
        f"logfile = {log}\npidfile = {workdir / 'pgbouncer.pid'}\n"
        "ignore_startup_parameters = extra_float_digits\n"
    )
    command = [exe]
    if os.geteuid() == 0:
        # pgbouncer refuses to run as root; -u drops to an unprivileged user.
        runas = "postgres" if _user_exists("postgres") else "nobody"
        shutil.chown(workdir, user=runas)
        for child in workdir.iterdir():
            shutil.chown(child, user=runas)
        command += ["-u", runas]
    proc = subprocess.Popen([*command, str(workdir / "pgbouncer.ini")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, proc, log)
        netloc = f"{user}@127.0.0.1:{port}"
        yield urlunsplit(("postgresql", netloc, f"/{dbname}", "", ""))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
