"""Validation shared by every entry point: prefixes, DSNs, durations, addresses, and
whether the web extra that HTTP needs is installed."""

from __future__ import annotations

import importlib.util
import re
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

from .errors import ConfigError

DEFAULT_PREFIX = "venturi_"
_PREFIX = re.compile(r"^[a-z_][a-z0-9_]{0,23}$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def validate_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a safe identifier prefix, else raise ``ConfigError``.

    It is the only text venturi splices into SQL, so nothing else is allowed
    (PostgreSQL folds case and truncates identifiers at 63 bytes: a looser rule
    could make two queues share an index name).
    """
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"invalid prefix {prefix!r}: use 1-24 characters of a-z, 0-9 and _, "
            "not starting with a digit (for example 'venturi_')"
        )
    return prefix


def mask_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***``, safe for logs and errors."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable dsn>"
    if parts.scheme and parts.password is not None:
        # Keep host and port as written: parsing the port raises on a malformed
        # or multi-host DSN, and masking must never fail.
        user = parts.username or ""
        hosts = parts.netloc.rpartition("@")[2]
        netloc = f"{user}:***@{hosts}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    # key=value form: password=secret
    return re.sub(r"(password\s*=\s*)(\S+)", r"\1***", dsn, flags=re.IGNORECASE)


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """Parse ``30s``, ``5m``, ``1h30m``, ``7d``, ``250ms`` (or plain seconds)."""
    raw = text.strip().lower()
    if not raw:
        raise ConfigError(f"{what}: empty duration (use e.g. 30s, 5m, 1h30m, 7d)")
    try:
        return timedelta(seconds=float(raw))
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION.finditer(raw):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(raw) or pos == 0:
        raise ConfigError(f"{what}: {text!r} is not a duration (use e.g. 30s, 5m, 1h30m, 7d)")
    return timedelta(seconds=total)


def parse_address(address: str, *, example: str = "127.0.0.1:9090") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9090`` for IPv6) to a (host, port) pair; an empty host is
    every interface."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--http {address!r} is not HOST:PORT (e.g. {example})")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


WEB_EXTRA = ("the worker's HTTP endpoints (--http: /healthz, /readyz, /metrics) need the "
             "web extra: pip install 'venturi[web]'")


# What the web extra installs (pyproject.toml), by the names they are imported as.
_WEB_MODULES = ("starlette", "jinja2", "uvicorn", "itsdangerous", "python_multipart")


def require_web() -> None:
    """Refuse with ``ConfigError``, naming the extra, unless the web stack is installed:
    what a worker's ``http`` address needs. Looked up, not imported."""
    if any(importlib.util.find_spec(name) is None for name in _WEB_MODULES):
        raise ConfigError(WEB_EXTRA)
