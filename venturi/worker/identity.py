"""Who a worker is, and the name lock that proves it (docs/concepts/leases.md, "Restarts:
boot recovery").

A worker's claims carry ``{name}/{boot_id}``. Before its first claim it takes a session
advisory lock on its name and holds it for life: while it holds the lock, no other live
process runs under that name, so claims of the same name and another boot id belong to
a dead process and may be recovered at once.
"""

from __future__ import annotations

import secrets

from . import config


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
