"""The queue's own vacuum, for servers where autovacuum is off or falls behind.

Every job leaves dead row versions behind (claim, settle, the retention delete) and,
more harmful, a dead entry in the claim index: the claim's index scan starts at the
oldest entry of its tier and walks every page of dead entries before the first
runnable row, so without VACUUM each claim costs more than the last
(docs/operations/maintenance.md has the mechanism and the figures). PostgreSQL's
autovacuum removes them when it runs; this module does it when it does not.

``vacuum_if_needed`` looks at the queue's two tables once: a table is vacuumed when
its dead row versions exceed ``dead_tuples + dead_fraction x live`` and, if
autovacuum is meant to visit it, no vacuum has finished for ``quiet_for``. One
worker of a queue does it at a time (a try-lock; the others skip). The VACUUM always
cleans the indexes (``INDEX_CLEANUP ON``: the claim index is the point), skips a
table someone else is vacuuming (``SKIP_LOCKED``) and never truncates the table
(``TRUNCATE false``: truncation takes an exclusive lock the claimers would queue
behind). A vacuum that could remove nothing because an old snapshot holds back the
xmin horizon is reported with the holder, and not repeated while the horizon stands.

It needs a connection of its own: not in a transaction (VACUUM cannot run in one),
not through a transaction-mode pooler (the try-lock is a session lock), owned by or
granted the tables' owner role (VACUUM skips other tables with a warning).
"""

from __future__ import annotations

from .store.postgres.vacuum import TABLES, table_health, table_names, vacuum_if_needed
from .store.vacuum import MaintenanceState, TableHealth, VacuumPolicy, VacuumRun

__all__ = ["TABLES", "MaintenanceState", "TableHealth", "VacuumPolicy", "VacuumRun",
           "table_health", "table_names", "vacuum_if_needed"]
