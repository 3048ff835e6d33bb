"""A SIGTERM or SIGINT at any moment of ``venturi worker``'s start ends it with exit 0 and
nothing claimed: never Python's default handler (-15), never a claim it would have to
release. Orchestrators signal pods that are still starting.

Each test holds a real ``venturi worker`` process at one point of its start, knows it is
there from something the process shows (its signal mask in /proc, a file the
application's import creates, a connection it opens, a log line, a lock it waits for),
and signals it there. A signal that reaches the interpreter before its first line of
venturi runs cannot be handled by any Python program; the earliest test signals as soon
as the process shows a handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from tests.cli_app_tasks import Echo
from venturi import Outcome, Queue, Status
from venturi.store.base import ClaimRequest
from venturi.store.postgres import PostgresStore

from ..conftest import wait_for
from .conftest import APP, ROOT, Cli, venturi_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SIGNALS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")]


class Proc:
    """One ``venturi worker`` process; its output goes to files for the assertions."""

    def __init__(self, tmp: Path, args: list[str], env: dict[str, str]) -> None:
        self.out = tmp / "worker.out"
        self.err = tmp / "worker.err"
        environ = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
        environ.update(env, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.popen = subprocess.Popen(
                [venturi_script(), "worker", *args], cwd=ROOT, env=environ, stdout=out,
                stderr=err, stdin=subprocess.DEVNULL)

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.out.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
        return found

    def logged(self, event: str, **fields: Any) -> bool:
        return any(e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
                   for e in self.events())

    def catches_sigterm(self) -> bool:
        """Whether the process has a handler of its own for SIGTERM (its SigCgt mask)."""
        self.alive()
        try:
            status = Path(f"/proc/{self.popen.pid}/status").read_text()
        except FileNotFoundError:
            return False
        (mask,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")]
        return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))

    def alive(self) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(f"the worker exited {self.popen.returncode} too early:\n"
                                 f"{self.out.read_text()}\n{self.err.read_text()}")
        return True

    async def exit_code(self) -> int:
        await wait_for(lambda: self.popen.poll() is not None, timeout=30,
                       what="the worker to exit")
        assert "Traceback" not in self.err.read_text(), self.err.read_text()
        return self.popen.returncode


@pytest.fixture
def pgq(pg_store_dbclock: PostgresStore) -> Queue:
    return Queue(pg_store_dbclock)


@pytest.fixture
def start(tmp_path: Path, pg_dsn: str, pgq: Queue) -> Iterator[Any]:
    """``start(*args, app=APP, dsn=..., env={})`` runs ``venturi worker`` on the test's
    queue; a process still alive at teardown is killed."""
    procs: list[Proc] = []

    def spawn(*args: str, app: str = APP, dsn: str = pg_dsn,
              env: dict[str, str] | None = None) -> Proc:
        proc = Proc(tmp_path, ["--app", app, "--grace", "5s", *args],
                    {"VENTURI_DSN": dsn, "VENTURI_PREFIX": pgq.prefix, **(env or {})})
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.popen.poll() is None:
            proc.popen.kill()
            proc.popen.wait(10)


async def untouched(queue: Queue, job_id: UUID) -> None:
    """The job was never claimed: still pending, run count 0, no journal."""
    row = await queue.job(job_id)
    assert row is not None
    assert (row.status, row.run_count, row.claimed_by) == (Status.PENDING, 0, None)
    assert await queue.journal(job_id) == []


@pytest.mark.parametrize("signum", SIGNALS)
async def test_signalled_as_soon_as_it_has_a_handler(
        pgq: Queue, start: Any, signum: int) -> None:
    job = await pgq.enqueue(Echo(uri="file:///s"))
    proc = start()
    await wait_for(proc.catches_sigterm, timeout=30, what="a SIGTERM handler")
    proc.popen.send_signal(signum)
    assert await proc.exit_code() == 0
    await untouched(pgq, job.id)


@pytest.mark.parametrize("signum", SIGNALS)
async def test_signalled_while_it_imports_the_application(
        pgq: Queue, start: Any, tmp_path: Path, signum: int) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    job = await pgq.enqueue(Echo(uri="file:///s"))
    proc = start(app="tests.cli.gated_app", env={"VENTURI_TEST_GATE": str(gate)})
    await wait_for(lambda: proc.alive() and (gate / "importing").exists(), timeout=30,
                   what="the application's import")
    assert proc.catches_sigterm()  # taken before the application is imported
    proc.popen.send_signal(signum)
    (gate / "go").touch()
    assert await proc.exit_code() == 0
    assert proc.logged("worker_not_started") and not proc.logged("worker_started")
    await untouched(pgq, job.id)


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """A DSN whose server accepts connections and never answers; the event is set
    once something connects."""
    connected = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def on_connect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        connected.set()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"postgresql://venturi@127.0.0.1:{port}/venturi", connected
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_signalled_while_it_connects(pgq: Queue, start: Any) -> None:
    async with silent_server() as (dsn, connected):
        proc = start(dsn=dsn)
        await wait_for(lambda: proc.alive() and connected.is_set(), timeout=30,
                       what="the worker to connect")
        proc.popen.send_signal(signal.SIGTERM)
        assert await proc.exit_code() == 0  # not 1: the connect timeout did not pass
    assert proc.logged("worker_not_started")


def refused_dsn() -> str:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://venturi@127.0.0.1:{port}/venturi"


async def test_signalled_while_the_boot_waits_for_the_database(pgq: Queue, start: Any) -> None:
    """The name's lock is taken on the direct (LISTEN) connection; while that server is
    down the boot backs off, and a drain gives the boot up."""
    job = await pgq.enqueue(Echo(uri="file:///s"))
    proc = start("--listen-dsn", refused_dsn())
    await wait_for(lambda: proc.alive() and proc.logged("db_unavailable", service="boot"),
                   timeout=30, what="the boot to back off")
    proc.popen.send_signal(signal.SIGTERM)
    assert await proc.exit_code() == 0
    assert not proc.logged("worker_started")
    await untouched(pgq, job.id)


async def test_signalled_during_boot_recovery(
        pgq: Queue, pg_store_dbclock: PostgresStore, pg_dsn: str, start: Any) -> None:
    """A claim of the name's earlier boot, and the jobs table locked by the test: the
    boot's recovery waits for the lock, the signal arrives, the recovery completes and
    the worker drains without claiming: the job ends pending, recovered once, claimed by
    nobody."""
    store = pg_store_dbclock
    job = await pgq.enqueue(Echo(uri="file:///s"))
    (claimed,) = await store.claim(ClaimRequest(
        "sig-recover/earlierboot", {Echo.__task__.kind: Echo.__task__.lease}, 1))
    assert claimed.id == job.id
    blocker = await asyncpg.connect(pg_dsn)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(f"LOCK TABLE {pgq.prefix}jobs IN EXCLUSIVE MODE")
        proc = start("--name", "sig-recover")

        async def recovery_waits() -> bool:
            # Not on the blocker: inside a transaction, pg_stat_activity is a snapshot.
            proc.alive()
            return bool(await store.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND position($1 in query) > 0",
                f"{pgq.prefix}jobs"))

        await wait_for(recovery_waits, timeout=30, what="the boot's recovery to wait")
        proc.popen.send_signal(signal.SIGTERM)
        await wait_for(lambda: proc.logged("signal_received", action="drain"), timeout=30,
                       what="the signal to be taken during the recovery")
        await tx.rollback()
    finally:
        await blocker.close()
    assert await proc.exit_code() == 0
    row = await pgq.job(job.id)
    assert row is not None
    assert (row.status, row.run_count, row.claimed_by) == (Status.PENDING, 1, None)
    assert [(e.run_no, e.outcome, e.note) for e in await pgq.journal(job.id)] == [
        (1, Outcome.STALE_RECOVERED, "worker-restarted")]


async def test_signalled_after_it_started(pgq: Queue, start: Any) -> None:
    job = await pgq.enqueue(Echo(uri="file:///s"), delay=dt.timedelta(hours=1))
    proc = start()
    await wait_for(lambda: proc.alive() and proc.logged("worker_started"), timeout=30,
                   what="worker_started")
    proc.popen.send_signal(signal.SIGTERM)
    assert await proc.exit_code() == 0
    assert proc.logged("worker_stopped", exit_code=0)
    await untouched(pgq, job.id)  # delayed: a started worker has nothing to claim


def test_the_command_gives_the_signals_back(cli: Cli) -> None:
    """In-process (tests, embedding programs), ``venturi worker`` hands SIGTERM and SIGINT
    back when it returns, here after refusing its input."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    result = cli("worker", "--app", APP, "--kinds", "cli.nope")
    assert result.exit_code == 1 and "cli.nope" in result.output
    assert {s: signal.getsignal(s) for s in before} == before


def test_the_command_takes_the_signals_before_anything_heavy_is_imported() -> None:
    """What ``venturi.cli.main`` imports before it takes SIGTERM: venturi's package and
    its signal record, nothing that takes the hundreds of milliseconds the driver, the
    worker and Typer do (a signal in that time used to kill a starting worker)."""
    code = ("import sys, venturi, venturi.worker.signals; "
            "print(sorted(m for m in ('asyncio', 'anyio', 'asyncpg', 'typer', 'venturi.queue',"
            " 'venturi.worker.worker', 'venturi.cli.app') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_main_takes_the_signals_before_it_imports_the_command_line() -> None:
    """``venturi.cli.main`` holds SIGTERM before Typer's application (and with it the
    driver and the worker) starts importing: a finder on the import path looks at the
    SIGTERM handler at the moment ``venturi.cli.app`` is asked for, then stops."""
    code = textwrap.dedent("""
        import signal, sys
        class Look:
            def find_spec(self, name, path=None, target=None):
                if name == "venturi.cli.app":
                    handler = signal.getsignal(signal.SIGTERM)
                    print("held" if callable(handler) else f"not held: {handler!r}",
                          flush=True)
                    raise SystemExit(0)
                return None
        sys.meta_path.insert(0, Look())
        sys.argv = ["venturi", "worker", "--help"]
        from venturi.cli import main
        main()
        print("venturi.cli.app was never imported")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "held", out.stdout + out.stderr


def test_a_signal_recorded_for_a_command_that_runs_no_worker_is_delivered() -> None:
    """A command that turns out not to be ``venturi worker`` gets the signals back, and
    one that arrived meanwhile reaches the handler it would have reached."""
    from venturi.worker.signals import STOP_SIGNALS

    previous = signal.getsignal(signal.SIGINT)
    assert not STOP_SIGNALS.installed
    STOP_SIGNALS.install()
    try:
        signal.raise_signal(signal.SIGINT)  # recorded, not raised
        assert STOP_SIGNALS.received == [signal.SIGINT]
        with pytest.raises(KeyboardInterrupt):
            STOP_SIGNALS.release()
        assert not STOP_SIGNALS.installed and STOP_SIGNALS.received == []
        assert signal.getsignal(signal.SIGINT) is previous
    finally:
        STOP_SIGNALS.uninstall()


def _spawn_command(*args: str) -> subprocess.Popen[bytes]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    return subprocess.Popen([venturi_script(), *args], cwd=ROOT, env=environ,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)


async def test_other_commands_keep_the_default_signals(pg_dsn: str, tmp_path: Path) -> None:
    """``venturi stats`` stuck connecting ends at SIGTERM like any command: the record
    ``venturi.cli.main`` takes first is given back once the command is not a worker."""
    async with silent_server() as (dsn, connected):
        proc = _spawn_command("stats", "--dsn", dsn)
        try:
            await wait_for(connected.is_set, timeout=30, what="stats to connect")
            proc.send_signal(signal.SIGTERM)
            await wait_for(lambda: proc.poll() is not None, timeout=30,
                           what="stats to end")
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == -signal.SIGTERM
