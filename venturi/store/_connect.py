"""Opening connections that survive a failover to a standby whose primary vanished.

Two things asyncpg does not do on its own, both needed when a host dies without a word
(a crashed machine, a partitioned network: packets are dropped, nothing is refused):

- A multi-host DSN (``postgresql://app@db1,db2/app?target_session_attrs=read-write``)
  is tried host by host, but asyncpg's ``timeout`` covers the whole attempt: a silent
  first host uses it up and the next is never tried. Here each host gets the timeout,
  as libpq's ``connect_timeout`` does, in the DSN's order.
- A connection whose peer went silent waits for TCP to give up, which Linux does after
  about 15 minutes of retransmissions; a statement in flight on it hangs as long. Here
  every TCP connection gets ``TCP_USER_TIMEOUT`` (unacknowledged data for longer than
  ``SILENT_PEER`` ends the connection) and keepalives (an idle one is probed), so the
  store's usual reconnect takes over. A statement that merely runs long sends nothing
  unacknowledged, and keepalives are answered by the server's kernel: neither is cut.

The dedicated sessions (LISTEN, the identity lock) also ask the server to probe their
client (``server_aware``): a session whose worker vanished with its host would otherwise
hold its worker name's lock until the server's TCP noticed, two hours by default, and
a replacement under the same name would be refused all that time.

See docs/operations/high-availability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg

from ._asyncpg_types import know_builtin_arrays

SILENT_PEER = 15.0  # seconds
_KEEPALIVE = {"TCP_KEEPIDLE": 5, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}
# Session attributes that one host alone can answer the same way as a list of hosts
# (the first that fits); prefer-standby and friends choose among hosts, so asyncpg keeps them.
_PER_HOST_ATTRS = frozenset({"any", "primary", "read-write"})
# What makes asyncpg move on to the next host: the host is not there, or not ready.
_NEXT_HOST = (OSError, TimeoutError, asyncpg.CannotConnectNowError,
              asyncpg.TargetServerAttributeNotMatched)


def single_host_dsns(dsn: str) -> list[str] | None:
    """One DSN per host of a multi-host URI DSN, in order; None when there is one host
    or the DSN is not a form this splits (keyword form, hosts given as parameters)."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return None
    if parts.scheme not in ("postgres", "postgresql"):
        return None
    query = parse_qs(parts.query)
    if "host" in query or "port" in query:
        return None
    attrs = (query.get("target_session_attrs") or
             [os.environ.get("PGTARGETSESSIONATTRS", "any")])[-1]
    if attrs not in _PER_HOST_ATTRS:
        return None
    userinfo, at, hosts = parts.netloc.rpartition("@")
    listed = hosts.split(",")
    if len(listed) < 2 or not all(listed):
        return None
    return [urlunsplit((parts.scheme, f"{userinfo}{at}{host}", parts.path, parts.query,
                        parts.fragment)) for host in listed]


def named(dsn: str, role: str) -> dict[str, str] | None:
    """``server_settings`` naming a session of venturi's ``venturi <role>`` (the column
    ``application_name`` of ``pg_stat_activity``, ``%a`` in the server's log), so an
    operator can tell its sessions apart (docs/operations/sizing.md, "Connection
    pools"). A name the user gave wins: the DSN's ``application_name`` (asyncpg sends
    it, this returns None) or, as libpq reads it, the environment's ``PGAPPNAME``."""
    try:
        if "application_name" in parse_qs(urlsplit(dsn).query):
            return None
    except ValueError:
        return None
    given = os.environ.get("PGAPPNAME")
    return {"application_name": given if given else f"venturi {role}"}


def bound_silence(conn: Any) -> None:
    """TCP_USER_TIMEOUT and keepalives on ``conn``'s socket (best effort: asyncpg has no
    public handle on it, and a unix socket needs neither)."""
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in _KEEPALIVE.items():
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT,
                            int(SILENT_PEER * 1000))
    except OSError:
        pass


# Session settings any user may set; 15 s of silence, like SILENT_PEER on our side.
_SERVER_PROBES = ("SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 5;"
                  " SET tcp_keepalives_count = 2; SET tcp_user_timeout = 15000")


async def server_aware(conn: Any) -> None:
    """Have the server probe this session's client (best effort: a server too old for
    ``tcp_user_timeout`` keeps its defaults)."""
    with contextlib.suppress(asyncpg.PostgresError):
        await conn.execute(_SERVER_PROBES)


async def connect(dsn: str, *args: Any, timeout: float = 60.0,  # noqa: ASYNC109 - asyncpg's
                  **kwargs: Any) -> Any:
    """``asyncpg.connect`` with a timeout per host, and silence bounded (module doc).
    Also the pool's ``connect=``: it passes the pool's own arguments through.

    A caller cancelled meanwhile (a worker stopping while its LISTEN session still
    connects) is let go at once, but the attempt itself is not interrupted: asyncpg
    cancelled between opening the socket and taking it over leaves the SSL request's
    future to fail unobserved, and asyncio prints "Future exception was never retrieved:
    ConnectionError('unexpected connection_lost() call')" (MagicStack/asyncpg#1211 is
    the family). It finishes in the background, and what it opened is closed."""
    attempt = asyncio.ensure_future(_connect(dsn, args, timeout, kwargs))
    try:
        return await asyncio.shield(attempt)
    except asyncio.CancelledError:
        _abandoned.add(attempt)  # the loop keeps only a weak reference to a task
        attempt.add_done_callback(_discard)
        raise


_abandoned: set[asyncio.Future[Any]] = set()


def _discard(attempt: asyncio.Future[Any]) -> None:
    """Close the connection an abandoned attempt opened, or take its error."""
    _abandoned.discard(attempt)
    if attempt.cancelled():
        return
    if attempt.exception() is None:
        attempt.result().terminate()


async def _connect(dsn: str, args: tuple[Any, ...], timeout: float,  # noqa: ASYNC109
                   kwargs: dict[str, Any]) -> Any:
    hosts = single_host_dsns(dsn)
    if hosts is None:
        conn = await asyncpg.connect(dsn, *args, timeout=timeout, **kwargs)
    else:
        last: BaseException | None = None
        for one in hosts:
            try:
                conn = await asyncpg.connect(one, *args, timeout=timeout, **kwargs)
                break
            except _NEXT_HOST as exc:
                last = exc
        else:
            assert last is not None
            raise last
    bound_silence(conn)
    know_builtin_arrays(conn)  # no type introspection round trip on first use
    return conn
