"""The wheel: built from the repository, installed in a fresh virtualenv, its
console script runs and migrates; cli/ and sql/ ship only as venturi.cli and
venturi.sql (DESIGN §1)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import drop_prefix, new_prefix
from tests.helpers import MIGRATIONS
from venturi.worker.http import WEB_EXTRA

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                              ".mypy_cache", ".ruff_cache", ".pytest_cache")


def _run(*cmd: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "VENTURI_DSN", "VENTURI_PREFIX")}
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path: Path, pg_dsn: str) -> None:
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=SKIP)  # build outside the work tree: no stray build/
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist",
         source, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("venturi-*.whl")

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    _run(venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", wheel,
         cwd=tmp_path)

    site = Path(_run(venv / "bin" / "python", "-c",
                     "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     cwd=tmp_path).stdout.strip())
    assert not (site / "cli").exists() and not (site / "sql").exists()
    assert (site / "venturi" / "cli" / "__init__.py").is_file()
    assert (site / "venturi" / "sql" / "0001_init.sql").is_file()
    statements = Path("venturi", "store", "postgres")
    shipped = {p.name for p in (site / statements).glob("*.sql")}
    assert shipped and shipped == {p.name for p in (ROOT / statements).glob("*.sql")}
    assert (site / "venturi" / "py.typed").is_file()
    top_level = {p.name for p in site.glob("venturi-*.dist-info/top_level.txt")}
    for record in site.glob("venturi-*.dist-info/RECORD"):
        names = {line.split("/")[0] for line in record.read_text().splitlines()}
        assert names <= {"venturi", record.parent.name, "..", "bin"} | top_level, names

    venturi = venv / "bin" / "venturi"
    assert "migrate" in _run(venturi, "--help", cwd=tmp_path).stdout
    prefix = new_prefix()
    try:
        first = _run(venturi, "--dsn", pg_dsn, "--prefix", prefix, "migrate", cwd=tmp_path)
        assert first.stdout.split() == [w for name in MIGRATIONS for w in ("applied", name)]
        again = _run(venturi, "migrate", "--dsn", pg_dsn, "--prefix", prefix, cwd=tmp_path)
        assert "up to date" in again.stdout
        # The README's first command, from the wheel: example jobs through a real worker.
        dev = _run(venturi, "dev", "--dsn", pg_dsn, "--prefix", prefix, "--jobs", "6",
                   "--latency", "0", cwd=tmp_path)
        assert "6/6 finished" in dev.stdout and "6 completed, 0 dead" in dev.stdout
        # `pip install venturi` stays lean: the worker's --http names the extra it needs.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(VENTURI_DSN=pg_dsn, VENTURI_PREFIX=prefix)
        lean = subprocess.run([str(venturi), "worker", "--app", "venturi.examples", "--http",
                               "127.0.0.1:0"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
        assert lean.returncode == 1 and lean.stderr.strip() == f"venturi: error: {WEB_EXTRA}"
        assert _run(venv / "bin" / "python", "-c",
                    "import importlib.util as u; print(u.find_spec('starlette') is None)",
                    cwd=tmp_path).stdout.strip() == "True"
    finally:
        asyncio.run(drop_prefix(pg_dsn, prefix))
