"""Storage: the contract (``base``) and its adapters (``postgres``, ``memory``)."""

from .base import ManualClock, Status, Store
from .memory import MemoryStore

__all__ = ["ManualClock", "MemoryStore", "Status", "Store"]
