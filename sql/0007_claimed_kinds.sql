-- venturi schema, version 7: the claimed jobs by kind, for the limited claims. Forward-only.
--
-- A limited claim counts the claimed jobs of its kinds (claim_limited per (kind,
-- limit_key), claim_limited_fast per kind; docs/concepts/flow-control.md). Through
-- jobs_expiry (0001_init.sql) that count read every claimed row of every kind and a
-- heap page for each to learn its kind, and, being a bitmap scan, it also read the
-- entries that settled claims leave behind until a vacuum: during a drain of 20,000
-- jobs the count walked up to 18,000 entries and 743 heap pages per claim, 1.4 ms of a
-- 2.8 ms statement. Here the count is one index range of its kinds, an (index-only)
-- index scan that marks the dead entries it passes so the next claims skip them.
-- The price is one entry per claim of any kind (a settled or recovered row leaves the
-- predicate: its new version adds none).
--
-- CREATE INDEX blocks writes to the jobs table while it reads it (not CONCURRENTLY:
-- migrations run in a transaction): on a table of 1,000,000 rows, about a second.
CREATE INDEX IF NOT EXISTS {prefix}jobs_claimed_kind
    ON {prefix}jobs (kind, limit_key) WHERE status = 'claimed';
