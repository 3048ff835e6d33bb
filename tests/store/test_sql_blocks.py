"""The named statements' loader (venturi/store/_sql.py): files, fragments, placeholders."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from venturi.store import _sql

_DOLLAR = re.compile(r"\$(\d+)")


def _unquoted(sql: str) -> str:
    return re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", "''", sql)


@pytest.mark.parametrize("name", sorted(_sql.queries("venturi_")))
def test_parameters_are_numbered_without_holes(name: str) -> None:
    """Every driver sends the ``$n`` text as it is: a hole would be a parameter with
    no type to infer."""
    query = _sql.queries("venturi_", "public")[name]
    used = {int(n) for n in _DOLLAR.findall(_unquoted(query.sql))}
    assert used == set(range(1, max(used) + 1)) if used else True


def test_no_statement_is_left_with_a_directive_or_a_comment() -> None:
    for name, query in _sql.queries("venturi_").items():
        assert "-- " not in query.sql and "{" not in query.sql.replace("'{", ""), name


def test_every_fragment_is_included() -> None:
    texts = [f.read_text(encoding="utf-8") for f in resources.files(_sql.STATEMENTS).iterdir()
             if f.name.endswith(".sql")]
    defined = {m for t in texts for m in re.findall(r"^-- fragment: (\w+)", t, re.MULTILINE)}
    included = {m for t in texts for m in re.findall(r"^\s*-- include: (\w+)", t, re.MULTILINE)}
    filling = {m for t in texts
               for m in re.findall(r"^\s*-- include: \w+ \(\w+: (\w+)\)", t, re.MULTILINE)}
    assert defined and defined == included | filling


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    """A throwaway package of .sql files to load."""
    root = tmp_path / "sqlpkg_blocks"
    root.mkdir()
    (root / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        yield root
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("sqlpkg_blocks", None)
        _sql._raw_blocks.cache_clear()


def test_fragments_are_included_across_files(package: Path) -> None:
    (package / "a.sql").write_text(
        "-- name: one\n-- why\nSELECT\n-- include: cols\nFROM t\n")
    (package / "b.sql").write_text(
        "-- fragment: cols\n-- the columns\na,\n-- include: last\n"
        "-- fragment: last\nb\n")
    assert _sql._raw_blocks("sqlpkg_blocks") == {"one": "SELECT\na,\nb\nFROM t"}


def test_a_slot_holds_what_its_includer_puts_there_and_nothing_otherwise(
    package: Path,
) -> None:
    (package / "a.sql").write_text(
        "-- name: plain\nWITH\n-- include: scan\nSELECT 1\n"
        "-- name: filtered\nWITH\n-- include: scan (extra: only_mine)\nSELECT 2\n"
        "-- fragment: scan\n-- the scan\nx AS (SELECT id FROM t\n  WHERE a\n-- slot: extra\n"
        "  ORDER BY id)\n"
        "-- fragment: only_mine\n  AND mine\n")
    assert _sql._raw_blocks("sqlpkg_blocks") == {
        "plain": "WITH\nx AS (SELECT id FROM t\n  WHERE a\n  ORDER BY id)\nSELECT 1",
        "filtered": "WITH\nx AS (SELECT id FROM t\n  WHERE a\n  AND mine\n  ORDER BY id)\n"
                    "SELECT 2"}


def test_the_limited_claim_scans_its_tiers_with_the_plain_claims_text() -> None:
    """claim_limited reuses claim_tiers, with not_full in each of its three tier scans;
    the plain claim and the fast path get the scans without it."""
    blocks = _sql._raw_blocks()
    tiers = blocks["claim"].split("low AS (", 1)[1].split("\nUPDATE", 1)[0]
    limited = blocks["claim_limited"]
    assert limited.count("FROM full_ AS f") == 3
    assert "full_" not in blocks["claim"] and "full_" not in blocks["claim_limited_fast"]
    unfiltered = "\n".join(ln for ln in limited.splitlines()
                           if "full_ AS f" not in ln and "f.kind = j.kind" not in ln)
    assert tiers in unfiltered


@pytest.mark.parametrize(("files", "says"), [
    ({"a.sql": "-- name: x\nSELECT 1\n", "b.sql": "-- name: x\nSELECT 2\n"}, "twice"),
    ({"a.sql": "-- name: x\n-- include: nope\n"}, "unknown fragment"),
    ({"a.sql": "-- name: x\n-- include: f\n-- fragment: f\n-- include: f\n"}, "itself"),
    ({"a.sql": "-- name: x\n-- include: f (s: g)\n-- fragment: f\na\n-- fragment: g\nb\n"},
     "no slot 's'"),
    ({"a.sql": "-- name: x\n-- include: f (s: g)\n-- fragment: f\na\n-- slot: s\n"},
     "unknown fragment 'g'"),
])
def test_bad_blocks_are_refused(package: Path, files: dict[str, str], says: str) -> None:
    for filename, text in files.items():
        (package / filename).write_text(text)
    with pytest.raises(RuntimeError, match=says):
        _sql._raw_blocks("sqlpkg_blocks")


def test_every_table_a_statement_names_is_schema_qualified() -> None:
    """A caller's connection (conn=) may have any search_path: a table the statements
    name without its schema would not be found there (tests/store/test_enqueue_postgres.py
    shows the symptom). Every table a migration creates is qualified in every statement."""
    tables = {m for f in resources.files("venturi.sql").iterdir()
              if f.name.endswith(".sql")
              for m in re.findall(r"CREATE TABLE IF NOT EXISTS \{prefix\}(\w+)", f.read_text())}
    assert {"jobs", "journal", "dependency_shards"} <= tables
    bare = {name: found for name, query in _sql.queries("p_", "s").items()
            if (found := set(re.findall(r"(?<![.\w'])p_(\w+)", query.sql)) & tables)}
    assert bare == {}
