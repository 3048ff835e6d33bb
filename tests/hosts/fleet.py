"""Processes on the test hosts, and what their runs recorded.

``HostProcess`` starts a program inside a host's namespace (``ip netns exec`` execs it,
so the pid is the program's and signals reach it directly); stdout and stderr go to
files. ``venturi_worker`` is the real console script, ``venturi worker --app
tests.hosts.tasks``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from benchmarks.workers import venturi_script

from . import tasks
from .netns import Network

ROOT = Path(__file__).resolve().parents[2]
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


class HostProcess:
    def __init__(self, net: Network, host: str, argv: list[str], logdir: Path, label: str,
                 env: dict[str, str] | None = None) -> None:
        self.host, self.label = host, label
        logdir.mkdir(parents=True, exist_ok=True)
        stem = f"{label}-{time.monotonic_ns()}"
        self.out, self.err = logdir / f"{stem}.log", logdir / f"{stem}.err"
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
                    tasks.HOST: host, **(env or {})}
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.popen = subprocess.Popen(net.exec(host, argv), cwd=ROOT, env=full_env,
                                          stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def terminate(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def errors(self) -> str:
        return self.err.read_text(errors="replace")

    def count(self, event: str) -> int:
        text = self.output()
        return text.count(f'"event": "{event}"') + text.count(f'"event":"{event}"')

    def events(self, event: str) -> list[dict[str, object]]:
        import json

        found = []
        for line in self.output().splitlines():
            if f'"{event}"' in line:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if item.get("event") == event:
                    found.append(item)
        return found


def venturi_worker(net: Network, host: str, dsn: str, prefix: str, logdir: Path, *,
                   name: str, concurrency: int, records: Path,
                   extra: list[str] | None = None,
                   env: dict[str, str] | None = None) -> HostProcess:
    argv = [venturi_script(), "worker", "--app", "tests.hosts.tasks", "--dsn", dsn,
            "--prefix", prefix, "--name", name, "--concurrency", str(concurrency),
            "--grace", "10s", "--log-format", "json", "--kinds", tasks.Work.__task__.kind,
            *(extra or [])]
    return HostProcess(net, host, argv, logdir, name,
                       env={tasks.RECORDS: str(records), **(env or {})})


def skew_worker(net: Network, host: str, dsn: str, prefix: str, logdir: Path, *,
                name: str, kinds: list[str], faketime: str | None,
                env: dict[str, str]) -> HostProcess:
    """``tests.hosts.worker`` under libfaketime: ``faketime`` is an offset like ``+3h``.
    The monotonic clock is left alone (FAKETIME_DONT_FAKE_MONOTONIC): a host whose wall
    clock is wrong still measures elapsed time correctly, and the event loop's timers
    (the local lease deadline, renewals, timeouts) run on it."""
    fake = {} if faketime is None else {
        "LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": faketime,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"}
    argv = [sys.executable, "-m", "tests.hosts.worker", "--dsn", dsn, "--prefix", prefix,
            "--name", name, "--kinds", ",".join(kinds)]
    return HostProcess(net, host, argv, logdir, name, env={**env, **fake})


@dataclass(frozen=True)
class Run:
    event: str
    job_id: UUID
    run_no: int
    host: str
    pid: int
    at: float  # time.monotonic() of the event
    slow: bool


def read_runs(records: Path) -> list[Run]:
    runs = []
    for path in sorted(records.glob("*.runs")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 7:  # a line cut short by a kill is no record
                runs.append(Run(parts[0], UUID(parts[1]), int(parts[2]), parts[3],
                                int(parts[4]), float(parts[5]), parts[6] == "1"))
    return runs


def starts_per_job(runs: list[Run]) -> Counter[UUID]:
    return Counter(r.job_id for r in runs if r.event == "start")
