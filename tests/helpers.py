"""Small builders shared by the store-level tests: those the shipped conformance
suite uses (``venturi.testing.builders``), re-exported for the tests kept here."""

from venturi.testing.builders import LEASE, add, claim_one, job, new_job, request, settlement

__all__ = ["LEASE", "add", "claim_one", "job", "new_job", "request", "settlement"]
