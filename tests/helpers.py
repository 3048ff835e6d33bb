"""Small builders shared by the store-level tests: those the shipped conformance
suite uses (``venturi.testing.builders``), re-exported for the tests kept here."""

from venturi.testing.builders import LEASE, add, claim_one, job, new_job, request, settlement

__all__ = ["LEASE", "MIGRATIONS", "add", "claim_one", "job", "new_job", "request", "settlement"]

# Every migration in sql/, in order: what a fresh prefix's `venturi migrate` applies.
# tests/test_migrations.py checks that this is what the package ships.
MIGRATIONS = ["0001_init.sql", "0002_storage.sql", "0003_kinds.sql", "0004_results.sql",
              "0005_trace.sql", "0006_tallies.sql", "0007_claimed_kinds.sql",
              "0008_workflows_fanin.sql"]
