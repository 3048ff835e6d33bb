"""Security: secrets stay out of errors, notes stay classifications, SQL stays bound.

The SQL scan walks every module of venturi (``venturi/`` and ``cli/``) and
fails on SQL text built by string formatting (f-strings, ``%``, ``.format``,
``+``): values must be bind parameters. The one permitted splice is the
validated table prefix, done by ``venturi/store/_sql.py`` (named statements
and the migration renderer).
"""

from __future__ import annotations

import ast
import re
import socket
import traceback
from pathlib import Path

import pytest

from venturi import DatabaseError, GiveUp, Queue, VenturiError
from venturi.store.postgres import PostgresListener, PostgresStore

SECRET = "s3cret"
ROOT = Path(__file__).resolve().parent.parent


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: nothing listens there


def _full_text(exc: BaseException) -> str:
    return str(exc) + repr(exc.args) + "".join(traceback.format_exception(exc))


async def _connect_error(dsn: str) -> BaseException:
    with pytest.raises(VenturiError) as info:
        async with Queue.connect(dsn):
            pass
    return info.value


async def test_password_absent_from_connection_refused() -> None:
    dsn = f"postgresql://user:{SECRET}@127.0.0.1:{_closed_port()}/test"
    exc = await _connect_error(dsn)
    assert isinstance(exc, DatabaseError) and "unavailable" in str(exc)
    assert "\n" not in str(exc)
    assert SECRET not in _full_text(exc)
    assert "user:***@127.0.0.1" in str(exc)  # still says where it tried


async def test_password_absent_from_wrong_database(pg_dsn: str) -> None:
    from urllib.parse import urlsplit

    target = urlsplit(pg_dsn)
    user = target.username or "root"
    dsn = (f"postgresql://{user}:{SECRET}@{target.hostname}:{target.port or 5432}"
           "/venturi_no_such_database")
    exc = await _connect_error(dsn)
    assert "database does not exist" in str(exc) and "\n" not in str(exc)
    assert SECRET not in _full_text(exc)


async def test_password_absent_from_malformed_dsn() -> None:
    for dsn in (f"postgresql://user:{SECRET}@127.0.0.1:notaport/test",
                f"host=127.0.0.1 user=x password={SECRET} dbname=test"):
        with pytest.raises(VenturiError) as info:
            await PostgresStore.connect(dsn, connect_timeout=2)
        assert SECRET not in _full_text(info.value), dsn


async def test_password_absent_from_listener_errors() -> None:
    dsn = f"postgresql://user:{SECRET}@127.0.0.1:{_closed_port()}/test"
    with pytest.raises(DatabaseError) as info:
        async with PostgresListener(dsn, "venturi_"):
            pass
    assert SECRET not in _full_text(info.value)


@pytest.mark.parametrize(("reason", "expected"), [
    ("unsupported-format", "unsupported-format"),
    ("line one\nline two\r\n\tthree", "line one line two three"),
    ("", "gave-up"),
    ("   \n ", "gave-up"),
])
def test_give_up_reason_is_one_short_line(reason: str, expected: str) -> None:
    assert GiveUp(reason).reason == expected


def test_give_up_reason_is_capped() -> None:
    reason = GiveUp("x" * 10_000 + "\n" + "secret payload").reason
    assert len(reason) == 200 and "\n" not in reason and "secret" not in reason
    assert str(GiveUp("a\nb")) == "a b"


# --- SQL built by string formatting ---------------------------------------------------------

_SQL = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|WHERE|DROP|CREATE|ALTER|TRUNCATE|GRANT|LISTEN"
    r"|UNLISTEN|NOTIFY|VALUES|JOIN|RETURNING)\b"
    r"|(?i:\bselect\b.+\bfrom\b|\binsert\s+into\b|\bdelete\s+from\b|\bupdate\s+\S+\s+set\b"
    r"|\b(drop|create|alter|truncate)\s+(table|index|schema)\b|\bpg_notify\b)",
    re.DOTALL,
)
# The validated-prefix splice (named statements and migrations) lives here only.
ALLOWED = {"venturi/store/_sql.py"}


def _text_parts(node: ast.AST) -> str:
    """The literal text a formatting expression is built from."""
    return " ".join(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


def sql_formatting(source: str) -> list[tuple[int, str]]:
    """(line, construct) of every SQL-looking string built by formatting."""
    found = []
    for node in ast.walk(ast.parse(source)):
        construct = None
        if isinstance(node, ast.JoinedStr) and any(
            isinstance(v, ast.FormattedValue) for v in node.values
        ):
            construct = "f-string"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(
            node.left, ast.Constant | ast.JoinedStr
        ):
            construct = "% formatting"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            construct = "+ concatenation"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("format", "format_map")):
            construct = ".format"
        if construct and _SQL.search(_text_parts(node)):
            found.append((node.lineno, construct))
    return found


def test_scanner_catches_formatted_sql() -> None:
    bad = [
        'q = f"SELECT * FROM jobs WHERE id = {value}"',
        'q = "SELECT * FROM jobs WHERE id = %s" % value',
        'q = "DELETE FROM jobs WHERE id = {}".format(value)',
        'q = "select id from jobs where kind = \'" + kind + "\'"',
        'q = "UPDATE " + table + " SET x = 1"',
        "conn.execute(f\"drop table {name}\")",
    ]
    for line in bad:
        assert sql_formatting(line), line
    fine = [
        'q = "SELECT * FROM jobs WHERE id = $1"',
        'msg = f"table {prefix}jobs does not exist: run `venturi migrate`"',
        'msg = f"job {index}: {reason}"',
        'n = a + b',
    ]
    for line in fine:
        assert not sql_formatting(line), line


def test_no_sql_built_by_string_formatting() -> None:
    offenders = []
    files = sorted((ROOT / "venturi").rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py"))
    assert len(files) > 5
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        for line, construct in sql_formatting(path.read_text(encoding="utf-8")):
            offenders.append(f"{rel}:{line}: SQL built by {construct}")
    assert not offenders, "use bind parameters:\n" + "\n".join(offenders)


def test_prefix_splice_is_validated() -> None:
    """The allowed splice refuses anything but an identifier prefix."""
    from venturi.errors import ConfigError
    from venturi.store import _sql

    with pytest.raises(ConfigError):
        _sql.queries("x; DROP TABLE y; --")
    with pytest.raises(ConfigError):
        _sql.render_migration("CREATE TABLE {prefix}jobs ()", "a'b")
    sql = _sql.queries("venturi_")["job"].sql
    assert "{prefix}" not in sql and "venturi_jobs" in sql


@pytest.mark.parametrize(("dsn", "masked"), [
    (f"postgresql://u:{SECRET}@db:5432/app", "postgresql://u:***@db:5432/app"),
    (f"postgresql://u:{SECRET}@h1:5432,h2:5433/app", "postgresql://u:***@h1:5432,h2:5433/app"),
    (f"postgresql://u:{SECRET}@[::1]:5432/app", "postgresql://u:***@[::1]:5432/app"),
    (f"postgresql://u:{SECRET}@db:port/app", "postgresql://u:***@db:port/app"),
    (f"postgresql://u:p@{SECRET}@db/app", "postgresql://u:***@db/app"),
    (f"host=db password={SECRET} user=u", "host=db password=*** user=u"),
    ("postgresql://u@db/app", "postgresql://u@db/app"),
])
def test_mask_dsn_never_fails_and_hides_the_password(dsn: str, masked: str) -> None:
    from venturi.config import mask_dsn

    assert mask_dsn(dsn) == masked
