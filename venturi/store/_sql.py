"""Loading named SQL blocks and splicing in the (validated) table prefix."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from ..config import validate_prefix

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
NOW_PARAM = "coalesce($1::timestamptz, now())"


@cache
def _raw_blocks(package: str, filename: str) -> dict[str, str]:
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        blocks[name] = "\n".join(lines).strip()
    return blocks


class Query:
    """One statement, ready to run. ``uses_now``: its ``$1`` is the clock."""

    __slots__ = ("name", "sql", "uses_now")

    def __init__(self, name: str, sql: str, uses_now: bool) -> None:
        self.name = name
        self.sql = sql
        self.uses_now = uses_now


# Table references (not channel names, which sit inside quotes).
_TABLE = re.compile(r"(?<!')\{prefix\}(jobs|journal|workers|migrations)\b")


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@cache
def queries(prefix: str, schema: str | None = None) -> dict[str, Query]:
    """The store's statements for ``prefix``; the prefix is the only splice besides
    ``schema``, the quoted schema that qualifies every table, so a caller's
    connection (``conn=``) works whatever its ``search_path``."""
    validate_prefix(prefix)
    qualified = prefix if schema is None else f"{quote_ident(schema)}.{prefix}"
    out: dict[str, Query] = {}
    for name, body in _raw_blocks("venturi.store.postgres", "statements.sql").items():
        uses_now = "{now}" in body
        body = _TABLE.sub(lambda m: f"{qualified}{m.group(1)}", body)
        sql = body.replace("{prefix}", prefix).replace("{now}", NOW_PARAM)
        out[name] = Query(name, sql, uses_now)
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
