"""Who a worker is, and the name lock that proves it (docs/concepts/leases.md, "Restarts:
boot recovery").

A worker's claims carry ``{name}/{boot_id}``. Before its first claim it takes a session
advisory lock on its name and holds it for life: while it holds the lock, no other live
process runs under that name, so claims of the same name and another boot id belong to
a dead process and may be recovered at once.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from contextlib import AsyncExitStack

import anyio

from ..errors import ConfigError
from ..logs import get_logger
from ..store.base import IdentityLock, Store
from . import config
from .health import DatabaseHealth

log = get_logger("venturi.worker")

PING_INTERVAL = 10.0  # seconds between liveness checks of the lock's session


class Identity:
    def __init__(self, name: str | None) -> None:
        self.boot_id = secrets.token_hex(6)
        self.explicit = name is not None  # an explicit name is refused if taken
        self.name = name or config.default_name()
        self.claimed_by = f"{self.name}/{self.boot_id}"

    def rename_unique(self) -> None:
        """Run under a name of this boot's own: the default name is another live
        process's (two containers sharing a hostname, both pid 1)."""
        self.name = f"{self.name}-{self.boot_id}"
        self.claimed_by = f"{self.name}/{self.boot_id}"


class NameLock:
    """The lock on this worker's name, taken at boot and held for life; ``lock`` is the
    one held (the name can change once, see :meth:`take`). Closed with ``stack``."""

    def __init__(self, store: Store, identity: Identity, stack: AsyncExitStack) -> None:
        self._store = store
        self._identity = identity
        self._stack = stack
        self.lock: IdentityLock | None = None

    async def _open(self) -> IdentityLock:
        self.lock = await self._stack.enter_async_context(
            self._store.identity_lock(self._identity.name))
        return self.lock

    async def take(self) -> bool:
        """Take the name's lock; True if this worker's name is its own, so claims of the
        name's earlier boots may be recovered. Safe to call again after a transient failure:
        the same lock object is retried, and ``acquire()`` first closes its previous session,
        so a failure after the lock was taken cannot leave us locked out by ourselves."""
        lock = self.lock or await self._open()
        if await lock.acquire():
            return True
        identity = self._identity
        if identity.explicit:
            raise ConfigError(
                f"worker name {identity.name!r} is held by a live worker: "
                "choose another --name or stop that worker first"
            )
        # Another live process has our default name (same hostname and pid, e.g. two
        # containers sharing a hostname): run under a unique name and recover nothing,
        # since the claims under the shared name may be live.
        log.warning("worker_name_taken", worker=identity.name)
        identity.rename_unique()
        if not await (await self._open()).acquire():
            raise ConfigError(f"cannot lock worker name {identity.name!r}")
        return False


class IdentityGuard:
    """Re-takes the name's lock after its session was lost; drains the worker if another
    process took the name meanwhile."""

    def __init__(self, lock: IdentityLock, identity: Identity, db: DatabaseHealth,
                 request_drain: Callable[[], None]) -> None:
        self._lock = lock
        self._identity = identity
        self._db = db
        self._request_drain = request_drain

    async def run(self) -> None:
        lock = self._lock
        while True:
            while not lock.lost.is_set():
                with anyio.move_on_after(PING_INTERVAL):
                    await lock.lost.wait()
                if not lock.lost.is_set():
                    await lock.ping()  # a silently dead session shows up here
            log.warning("identity_lock_lost", worker=self._identity.name)
            if not await self._db.retry("identity", lock.acquire):
                log.error("identity_taken", worker=self._identity.name,
                          note="another worker holds this name; draining")
                self._request_drain()
                return
