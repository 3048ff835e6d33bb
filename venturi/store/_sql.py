"""Loading the named SQL blocks and splicing in the (validated) table prefix.

PostgresStore's statements live in the ``*.sql`` files of
``venturi.store.postgres``, one file per concern, read once. A file holds
blocks, each starting with a header line:

- ``-- name: NAME`` begins a statement, run as ``queries(prefix)[NAME]``;
- ``-- fragment: NAME`` begins a piece of SQL that several statements share
  (a CTE chain, a guard); a line ``-- include: NAME`` in a block stands for it.
  A fragment may leave a line ``-- slot: SLOT`` for its includers to fill:
  ``-- include: NAME (SLOT: OTHER)`` puts fragment OTHER there, a plain include
  nothing.

Two comment lines say what a driver may keep of a statement's plan (docs/operations/
maintenance.md, "Plans that outlive the table they were made for"):

- ``-- prepared: WHY`` marks a statement that reads no table, whose generic plan
  therefore cannot go stale: the psycopg driver keeps only those prepared, and the
  asyncpg driver lets a run of them use a generic plan (asyncpg_plans.py);
- ``-- plan: cached`` marks one the asyncpg driver runs on connections of its own that
  plan it once, with sequential scans and hash and merge joins priced out
  (asyncpg_driver.py says why): the claim, and the limited claim's fast path.

Other ``--`` lines are comments and are dropped. In the text, ``{prefix}`` is
the validated table prefix (table names are also schema-qualified) and
``{now}`` the clock: ``$1``, or the database's ``now()`` when the store's clock
returns None (``{clock}``: the same, but ``clock_timestamp()``, for a statement that
must read the time after a lock its transaction waited for). Those are the only
splices: every value is a bind parameter, written ``$n``, and every driver sends
the text as it is (psycopg through its ``RawCursor``).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

from ..config import validate_prefix

_HEADER = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^\s*-- include: (\w+)\s*$", re.MULTILINE)
_CACHED_PLAN = re.compile(r"^-- plan: cached\s*$", re.MULTILINE)
_PREPARED = re.compile(r"^-- prepared: ", re.MULTILINE)
NOW_PARAM = "coalesce($1::timestamptz, now())"
CLOCK_PARAM = "coalesce($1::timestamptz, clock_timestamp())"
STATEMENTS = "venturi.store.postgres"


_BOUND_INCLUDE = re.compile(r"^\s*-- include: (\w+) \((\w+): (\w+)\)\s*$", re.MULTILINE)
_SLOT = re.compile(r"^\s*-- slot: (\w+)\s*$", re.MULTILINE)


def _sql_files(package: str) -> list[Any]:
    return sorted((f for f in resources.files(package).iterdir() if f.name.endswith(".sql")),
                  key=lambda f: f.name)


@cache
def _marked(marker: re.Pattern[str], package: str = STATEMENTS) -> frozenset[str]:
    """The statements of ``package`` whose block holds a ``marker`` line."""
    return frozenset(name for file in _sql_files(package)
                     for kind, name, body in _blocks(file.read_text(encoding="utf-8"))
                     if kind == "name" and marker.search(body))


def _blocks(text: str) -> list[tuple[str, str, str]]:
    """(kind, name, body) of every block of one file."""
    parts = _HEADER.split(text)
    return [(kind, name, body) for kind, name, body
            in zip(parts[1::3], parts[2::3], parts[3::3], strict=True)]


@cache
def _raw_blocks(package: str = STATEMENTS) -> dict[str, str]:
    """Every statement of ``package``'s ``*.sql`` files, fragments included and
    comments dropped, by name."""
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for file in _sql_files(package):
        for kind, name, body in _blocks(file.read_text(encoding="utf-8")):
            if name in statements or name in fragments:
                raise RuntimeError(f"SQL block {name!r} is defined twice ({file.name})")
            (statements if kind == "name" else fragments)[name] = body

    def fragment(name: str, seen: tuple[str, ...]) -> str:
        if name not in fragments:
            raise RuntimeError(f"SQL block includes unknown fragment {name!r}")
        if name in seen:
            raise RuntimeError(f"SQL fragment {name!r} includes itself")
        return fragments[name]

    def expand(body: str, seen: tuple[str, ...]) -> str:
        def include(match: re.Match[str]) -> str:
            name = match.group(1)
            return expand(fragment(name, seen), (*seen, name))

        def bound_include(match: re.Match[str]) -> str:
            name, slot, filler = match.groups()
            text = fragment(name, seen)
            if slot not in _SLOT.findall(text):
                raise RuntimeError(f"SQL fragment {name!r} has no slot {slot!r}")
            filled = _SLOT.sub(lambda m: f"-- include: {filler}" if m.group(1) == slot
                               else "", text)
            return expand(filled, (*seen, name))

        body = _BOUND_INCLUDE.sub(bound_include, body)
        code = "\n".join(ln for ln in _INCLUDE.sub(include, body).splitlines()
                         if ln.strip() and not ln.lstrip().startswith("--"))
        return code

    return {name: expand(body, ()) for name, body in statements.items()}


class Query:
    """One statement, ready to run. ``uses_now``: its ``$1`` is the clock;
    ``prepared``: it reads no table, so a driver may keep it prepared;
    ``cached_plan``: its block says ``-- plan: cached`` (see above)."""

    __slots__ = ("cached_plan", "name", "prepared", "sql", "uses_now")

    def __init__(self, name: str, sql: str, uses_now: bool, prepared: bool = False,
                 cached_plan: bool = False) -> None:
        self.name = name
        self.sql = sql
        self.uses_now = uses_now
        self.prepared = prepared
        self.cached_plan = cached_plan


# Table references (not channel names, which sit inside quotes).
_TABLE = re.compile(
    r"(?<!')\{prefix\}(jobs|journal|workers|migrations|tallies|kinds|kind_starts|dependencies"
    r"|dependency_shards|workflows)\b")


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def listen(channel: str) -> str:
    """``LISTEN`` on ``channel``: what a listener's keep-alive ping sends on a channel it
    already listens on (venturi/store/postgres/asyncpg_sessions.py)."""
    return f"LISTEN {quote_ident(channel)}"


@cache
def queries(prefix: str, schema: str | None = None) -> dict[str, Query]:
    """The store's statements for ``prefix``; the prefix is the only splice besides
    ``schema``, the quoted schema that qualifies every table, so a caller's
    connection (``conn=``) works whatever its ``search_path``."""
    validate_prefix(prefix)
    qualified = prefix if schema is None else f"{quote_ident(schema)}.{prefix}"
    out: dict[str, Query] = {}
    prepared, cached = _marked(_PREPARED), _marked(_CACHED_PLAN)
    for name, body in _raw_blocks().items():
        uses_now = "{now}" in body or "{clock}" in body
        body = _TABLE.sub(lambda m: f"{qualified}{m.group(1)}", body)
        sql = (body.replace("{prefix}", prefix).replace("{now}", NOW_PARAM)
               .replace("{clock}", CLOCK_PARAM))
        out[name] = Query(name, sql, uses_now, name in prepared, name in cached)
    return out


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, raw sql) of every shipped migration, in order."""
    found = []
    for entry in resources.files("venturi.sql").iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [v for v, _, _ in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration numbers in venturi.sql: {versions}")
    return found


def render_migration(raw: str, prefix: str) -> str:
    return raw.replace("{prefix}", validate_prefix(prefix))
