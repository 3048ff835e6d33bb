"""The arrays of PostgreSQL's built-in types, made known to each new asyncpg connection.

asyncpg brings codecs of its own for the built-in scalar types, but of their arrays only
``text[]`` and ``oid[]``. The first statement on a connection that binds or returns any
other array sends asyncpg's type introspection first: a recursive catalog query that
costs about 9 ms of server time (a 3 ms parse and a 6 ms bind), once per connection.
venturi's statements bind ``uuid[]``, ``int2[]``, ``int4[]``, ``bool[]``,
``timestamptz[]``, ``interval[]`` and ``regclass[]``, so every new connection paid it:
a worker's first claim (``interval[]``, on the claim session it opens at boot), its
first settle on each pool connection (``uuid[]``), a producer's first ``enqueue_many``
on each of its pool's connections (benchmarks/results-throughput.md, "Type
introspection").

These arrays have fixed OIDs (PostgreSQL's ``pg_type.dat``) and elements whose codecs
asyncpg already has: :func:`know_builtin_arrays` registers them as the introspection
would have, without the round trip. asyncpg has no public call for it
(``set_type_codec`` introspects too), so this uses the one asyncpg itself makes with the
introspection's rows, ``register_data_types`` of the protocol's settings; if a later
asyncpg moves it, nothing breaks (asyncpg introspects as before) and
tests/store/test_asyncpg_types.py says so.
"""

from __future__ import annotations

from typing import Any

# array OID: (element OID, element name), every array in pg_catalog with delimiter ","
# (tests/store/test_asyncpg_types.py compares them with the server's pg_type)
BUILTIN_ARRAYS: dict[int, tuple[int, str]] = {
    199: (114, "json"),
    1000: (16, "bool"),
    1001: (17, "bytea"),
    1005: (21, "int2"),
    1007: (23, "int4"),
    1015: (1043, "varchar"),
    1016: (20, "int8"),
    1021: (700, "float4"),
    1022: (701, "float8"),
    1115: (1114, "timestamp"),
    1182: (1082, "date"),
    1185: (1184, "timestamptz"),
    1187: (1186, "interval"),
    1231: (1700, "numeric"),
    2210: (2205, "regclass"),
    2951: (2950, "uuid"),
    3807: (3802, "jsonb"),
}

# The rows asyncpg's introspection query returns for them (the fields its codec
# registry reads for an array).
_ROWS = [
    {"oid": oid, "ns": "pg_catalog", "name": f"_{name}", "kind": b"b", "basetype": None,
     "elemtype": elem, "elemdelim": b",", "range_subtype": None, "attrtypoids": None,
     "attrnames": None, "elemtype_name": name, "basetype_name": None,
     "range_subtype_name": None}
    for oid, (elem, name) in BUILTIN_ARRAYS.items()
]


def know_builtin_arrays(conn: Any) -> bool:
    """Register the built-in arrays' codecs on a new asyncpg connection; False where
    this asyncpg does not take them so (then it introspects them, as it always did)."""
    try:
        conn._protocol.get_settings().register_data_types(_ROWS)
    except Exception:  # an asyncpg without this internal: it introspects, as it did
        return False
    return True
