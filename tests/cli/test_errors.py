"""Error paths through the real console script: one line on stderr, the right exit
code, never a traceback, never the DSN's password."""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from .conftest import APP, Cli, one_line_error

SECRET = "s3cret-Pw9"


def with_password(dsn: str, *, user: str | None = None, port: int | None = None,
                  database: str | None = None) -> str:
    parts = urlsplit(dsn)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{user or parts.username or 'root'}:{SECRET}@{host}:{port or parts.port or 5432}"
    path = f"/{database}" if database else parts.path
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def check(proc: object, code: int, expected: str) -> str:
    out, err, rc = proc.stdout, proc.stderr, proc.returncode  # type: ignore[attr-defined]
    assert rc == code, (rc, out, err)
    assert "Traceback" not in out + err
    assert SECRET not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("venturi: error: "), lines[0]
    assert expected in lines[0], lines[0]
    return str(lines[0])


@pytest.mark.slow
def test_console_script_error_paths(bare: Cli) -> None:
    # With trust authentication the password is accepted and ignored, so the same
    # secret-bearing DSN reaches the server for the paths that need it to.
    good = with_password(bare.dsn)
    q = ["--prefix", bare.prefix]
    cases = [
        (["--dsn", with_password(bare.dsn, port=1), "stats"], 1, "database unavailable"),
        (["stats", "--dsn", with_password(bare.dsn, user="venturi_no_such_role")], 1,
         "authentication failed"),
        (["--dsn", with_password(bare.dsn, database="venturi_no_such_db"), "jobs"], 1,
         "database does not exist"),
        (["--dsn", good, *q, "stats"], 1, "run `venturi migrate`"),
        (["--dsn", good, *q, "job", str(uuid.uuid4())], 1, "run `venturi migrate`"),
        (["--dsn", f"host=127.0.0.1 port=1 user=root password={SECRET} dbname=test", "workers"],
         1, "password=*** dbname=test"),
        (["--dsn", "postgresql://root@127.0.0.1:5432/test", "--prefix", "Bad-Prefix", "stats"], 2,
         "--prefix: invalid prefix"),
        (["--dsn", good, *q, "cleanup", "--older-than", "soon"], 2, "--older-than"),
        (["stats"], 2, "no database given"),
        (["--dsn", good, *q, "enqueue", "cli.echo", "--app", "tests.does_not_exist"], 1,
         "--app tests.does_not_exist: no module named"),
        (["--dsn", good, *q, "worker", "--app", APP, "--kinds", "cli.echo,cli.nope"], 1,
         "--kinds: unknown kind 'cli.nope'; tests.cli_app_tasks defines: cli.echo, "
         "cli.refresh, cli.reject"),
    ]
    for args, code, expected in cases:
        check(bare.subprocess(*args), code, expected)

    bare.ok("migrate")
    missing = str(uuid.uuid4())
    check(bare.subprocess("--dsn", good, *q, "job", missing), 1, f"unknown job id {missing}")
    check(bare.subprocess("--dsn", good, *q, "enqueue", "cli.nope", "--app", APP), 1,
          "unknown task kind 'cli.nope'; known kinds: cli.echo, cli.refresh, cli.reject")
    # A usage error Typer reports itself: exit 2, no traceback.
    usage = bare.subprocess("stats", "--no-such-option")
    assert usage.returncode == 2 and "Traceback" not in usage.stdout + usage.stderr


def test_bad_app_module_import_errors_are_one_line(bare: Cli, tmp_path: Path) -> None:
    root = tmp_path
    (root / "broken_tasks.py").write_text("import venturi\nraise RuntimeError('boom at import')\n")
    (root / "typo_tasks.py").write_text("def oops(:\n")
    env = {"PYTHONPATH": str(root)}
    for module, expected in (("broken_tasks", "RuntimeError: boom at import"),
                             ("typo_tasks", "syntax error")):
        proc = bare.subprocess("--dsn", bare.dsn, "enqueue", "x", "--app", module, env=env)
        assert f"--app {module}" in check(proc, 1, expected)


@pytest.mark.parametrize(("args", "expected"), [
    (["worker", "--app", APP, "--concurrency", "0"], "Invalid value for '--concurrency'"),
    (["worker", "--app", APP, "--concurrency", "lots"], "Invalid value for '--concurrency'"),
    (["jobs", "--limit", "0"], "Invalid value for '--limit'"),
    (["dev", "--jobs", "0"], "Invalid value for '--jobs'"),
    (["stats", "--no-such-option"], "No such option: --no-such-option"),
    (["--no-such-option", "stats"], "No such option: --no-such-option"),
    (["no-such-command"], "No such command 'no-such-command'"),
])
def test_usage_errors_are_one_line_naming_the_problem(
        cli: Cli, args: list[str], expected: str) -> None:
    """What click itself refuses (a value out of range or of the wrong type, an unknown
    option or command) reads like the CLI's own checks: one line, exit 2."""
    line = one_line_error(cli(*args), code=2)
    assert expected in line and "--help" in line, line


def test_usage_error_through_the_console_script_and_help_still_shown(cli: Cli) -> None:
    proc = cli.subprocess("worker", "--app", APP, "--concurrency", "0")
    check(proc, 2, "(see venturi worker --help)")
    bare_call = cli.subprocess()  # no command: the help, as before
    assert bare_call.returncode == 2 and "Usage: venturi" in bare_call.stdout + bare_call.stderr
    assert "venturi: error:" not in bare_call.stderr
