"""``venturi worker`` processes for the benchmarks and the fault-injection run: the
real console script, with ``--app tests.chaos.tasks``, logging JSON to a file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = "tests.chaos.tasks"


def venturi_script() -> str:
    """The console script of the running interpreter's environment."""
    beside = Path(sys.executable).parent / "venturi"
    if beside.exists():
        return str(beside)
    found = shutil.which("venturi")
    if found is None:
        raise RuntimeError("the venturi console script is not installed (pip install -e .)")
    return found


class WorkerProc:
    """One ``venturi worker`` process; stdout (JSON logs) and stderr go to files."""

    def __init__(self, dsn: str, prefix: str, logdir: Path, *, name: str | None = None,
                 concurrency: int = 10, grace: str = "5s", extra: list[str] | None = None,
                 global_options: list[str] | None = None,
                 env: dict[str, str] | None = None, app: str = APP) -> None:
        self.name = name
        logdir.mkdir(parents=True, exist_ok=True)
        stem = f"{name or 'worker'}-{time.monotonic_ns()}"
        self.out = logdir / f"{stem}.log"
        self.err = logdir / f"{stem}.err"
        args = [venturi_script(), *(global_options or []), "worker", "--app", app,
                "--dsn", dsn, "--prefix", prefix, "--concurrency", str(concurrency),
                "--grace", grace, "--log-format", "json", *(extra or [])]
        if name is not None:
            args += ["--name", name]
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.popen = subprocess.Popen(args, cwd=ROOT, env=full_env, stdout=out, stderr=err,
                                          stdin=subprocess.DEVNULL)
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def kill9(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def terminate(self) -> None:
        self.popen.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def errors(self) -> str:
        return self.err.read_text(errors="replace")

    def logged(self, event: str) -> bool:
        return f'"event": "{event}"' in self.output() or f'"event":"{event}"' in self.output()

    def rss_kib(self) -> int | None:
        """VmRSS of the process, in KiB (None once it has exited)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None
