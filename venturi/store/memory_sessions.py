"""In-process stand-ins for MemoryStore's dedicated sessions: LISTEN and the worker
identity lock."""

from __future__ import annotations

import asyncio

from .base import IdentityLock, Listener


class MemoryIdentityLock(IdentityLock):
    """In-process stand-in for the session advisory lock on a worker name."""

    def __init__(self, locks: dict[str, object], name: str) -> None:
        self._locks = locks  # the store's: worker name -> the lock holding it
        self._name = name
        self._token = object()
        self.lost = asyncio.Event()

    async def __aenter__(self) -> MemoryIdentityLock:
        return self

    async def acquire(self) -> bool:
        holder = self._locks.setdefault(self._name, self._token)
        return holder is self._token

    async def __aexit__(self, *exc: object) -> None:
        if self._locks.get(self._name) is self._token:
            del self._locks[self._name]


class MemoryListener(Listener):
    """Notifications pushed by the store to every listener open on it."""

    def __init__(self, listeners: set[MemoryListener],
                 channels: frozenset[str] = frozenset({"jobs", "control"})) -> None:
        self._listeners = listeners  # the store's open listeners
        self._channels = channels  # the labels this one listens to
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    def push(self, channel: str, payload: str) -> None:
        if channel in self._channels and not self._arrived(channel, payload):
            self._queue.put_nowait((channel, payload))

    async def __aenter__(self) -> MemoryListener:
        self._listeners.add(self)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._listeners.discard(self)

    async def receive(self) -> tuple[str, str]:
        return await self._queue.get()
