"""Where a worker or the CLI connects for a backend: its ``OPTIONS["dsn"]``, else a
URI made from the backend's ``DATABASES`` entry (the same server, database, role
and TLS settings Django uses)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from .backend import VenturiBackend

# libpq settings asyncpg reads from a URI as Django's OPTIONS give them.
PASSED = ("sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl", "passfile",
          "target_session_attrs", "connect_timeout", "application_name")
# OPTIONS that concern Django's connection only.
DJANGO_ONLY = ("pool", "server_side_binding", "isolation_level", "assume_role",
               "prepare_threshold", "cursor_factory", "context", "client_encoding")


def backend_dsn(backend: VenturiBackend) -> str:
    if backend.config.dsn is not None:
        return backend.config.dsn
    return database_dsn(backend.database)


def database_dsn(alias: str) -> str:
    """A ``postgresql://`` URI for ``DATABASES[alias]`` (the test database under the
    test runner, which renames it in this process)."""
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(f"DATABASES[{alias!r}] is {wrapper.vendor}, not PostgreSQL")
    return dsn_of(alias, wrapper.settings_dict)


def dsn_of(alias: str, s: dict[str, Any]) -> str:
    """The URI of one ``DATABASES`` entry (``alias`` names it in errors)."""
    options: dict[str, Any] = dict(s.get("OPTIONS") or {})
    query: dict[str, str] = {}
    for key, value in options.items():
        if key in PASSED:
            query[key] = str(value)
        elif key == "options":
            query.update(_server_settings(alias, str(value)))
        elif key not in DJANGO_ONLY:
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}]['OPTIONS'][{key!r}] has no equivalent in a DSN "
                "venturi's worker can use: set the backend's OPTIONS['dsn']")
    host = str(s.get("HOST") or "")
    netloc = ""
    if s.get("USER"):
        netloc = quote(str(s["USER"]), safe="")
        if s.get("PASSWORD"):
            netloc += ":" + quote(str(s["PASSWORD"]), safe="")
        netloc += "@"
    if host.startswith("/"):
        query["host"] = host  # a socket directory
    elif host:
        netloc += f"[{host}]" if ":" in host else host
    if s.get("PORT"):
        if host.startswith("/"):
            query["port"] = str(s["PORT"])
        else:
            netloc += f":{s['PORT']}"
    dsn = f"postgresql://{netloc}/{quote(str(s.get('NAME') or ''), safe='')}"
    return dsn + ("?" + urlencode(query) if query else "")


def _server_settings(alias: str, options: str) -> dict[str, str]:
    """``-c name=value`` pairs of libpq's ``options`` as server settings."""
    found: dict[str, str] = {}
    words = options.split()
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c" and i + 1 < len(words):
            pair, i = words[i + 1], i + 2
        elif (word.startswith("-c") and len(word) > 2) or (word.startswith("--") and "=" in word):
            pair, i = word[2:], i + 1
        else:
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}]['OPTIONS']['options'] holds {word!r}, which venturi's "
                "worker cannot pass on: set the backend's OPTIONS['dsn']")
        name, sep, value = pair.partition("=")
        if not sep:
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}]['OPTIONS']['options']: {pair!r} is not name=value")
        found[name.replace("-", "_")] = value
    return found
