-- Claims and their leases (venturi/store/_sql.py says how these files are read).

-- name: claim
-- Runnable jobs of the worker's kinds, claimed under their kind's lease, in one
-- statement (docs/concepts/priorities.md). Reserved slots lock tier 2 and tier 1
-- rows first; the fill takes the rest in priority order, one bounded range scan
-- per tier (so future-scheduled rows of a high tier are never walked). CTEs are
-- pulled lazily: a tier is only scanned, and its rows only locked, when the fill
-- still needs rows. A tier's fill is the same scan as its reservation, read on past
-- the reserved rows (claim_tiers).
--
-- Kinds a row of {prefix}kinds pauses or limits are left out here: they are claimed
-- by claim_limited (flow.sql), so a worker whose idea of them is stale never claims
-- past a limit or a pause (docs/concepts/flow-control.md).
--
-- Planned once per connection, not per call (the plan of a pickup's claim costs more
-- than running it): each tier is a bounded scan of the claim index, and on the
-- driver's plan-caching connections the join back to the jobs table can only be a
-- nested loop over its primary key, whatever size the table had when the plan was
-- made (docs/operations/maintenance.md, "Plans that outlive the table they were made
-- for"; tests/store/test_plan_cache.py).
-- plan: cached
WITH kinds AS (
    SELECT k.kind, k.lease FROM unnest($2::text[], $3::interval[]) AS k(kind, lease)
), open_kinds AS (
    SELECT coalesce(array_agg(k.kind), '{}') AS a FROM unnest($2::text[]) AS k(kind)
    WHERE NOT EXISTS (SELECT 1 FROM {prefix}kinds AS s WHERE s.kind = k.kind AND
-- include: controlled
    )
),
-- include: claim_tiers
UPDATE {prefix}jobs AS j SET
    status = 'claimed',
    claimed_by = $7,
    run_count = j.run_count + 1,
    claim_expires_at = {now} + k.lease
FROM picked, kinds AS k
WHERE j.id = picked.id AND k.kind = j.kind
RETURNING
-- include: job_columns

-- name: runnable_left
-- Whether a runnable row of kinds $2 is left, locked or not, in a kind no row of
-- {prefix}kinds pauses (limited kinds count: the caller asks only of those it found
-- with room). A claim skips the rows another transaction holds (SKIP LOCKED): a
-- result() caller's flag (inspect.sql, watch_job), a retry, a merge. So a drain to
-- empty asks this after an empty claim before it ends (venturi/worker/claimer.py).
-- One bounded probe per tier, as in next_visible_at.
WITH open_kinds AS (
    SELECT coalesce(array_agg(k.kind), '{}') AS a FROM unnest($2::text[]) AS k(kind)
    WHERE NOT EXISTS (SELECT 1 FROM {prefix}kinds AS s WHERE s.kind = k.kind AND s.paused)
)
SELECT EXISTS (SELECT 1 FROM {prefix}jobs WHERE status = 'pending' AND priority = 0
        AND visible_at <= {now} AND kind = ANY((SELECT a FROM open_kinds)::text[]))
    OR EXISTS (SELECT 1 FROM {prefix}jobs WHERE status = 'pending' AND priority = 1
        AND visible_at <= {now} AND kind = ANY((SELECT a FROM open_kinds)::text[]))
    OR EXISTS (SELECT 1 FROM {prefix}jobs WHERE status = 'pending' AND priority = 2
        AND visible_at <= {now} AND kind = ANY((SELECT a FROM open_kinds)::text[]))

-- name: extend_leases
-- Renewal for all of a worker's running jobs at once, each guarded by its epoch
-- (docs/concepts/leases.md). $4 holds [run_no, lease in microseconds] under each id.
UPDATE {prefix}jobs AS j
SET claim_expires_at = {now} + ($4::jsonb -> (j.id::text) ->> 1)::int8 * interval '1 microsecond'
WHERE
-- include: still_held
RETURNING j.id

-- name: next_visible_at
-- One probe per tier: min() across the tiers of one index would walk it.
SELECT least(
    (SELECT visible_at FROM {prefix}jobs WHERE status = 'pending' AND priority = 0
        AND visible_at > {now} AND kind = ANY($2::text[]) ORDER BY visible_at LIMIT 1),
    (SELECT visible_at FROM {prefix}jobs WHERE status = 'pending' AND priority = 1
        AND visible_at > {now} AND kind = ANY($2::text[]) ORDER BY visible_at LIMIT 1),
    (SELECT visible_at FROM {prefix}jobs WHERE status = 'pending' AND priority = 2
        AND visible_at > {now} AND kind = ANY($2::text[]) ORDER BY visible_at LIMIT 1))

-- fragment: still_held
-- The guard of every write by a claim's holder (docs/concepts/leases.md, claim
-- epochs): the row of each id in $3 is still claimed, by $2, at the run number its
-- input under its id in $4 starts with. Each row finds its input by a key lookup,
-- not a join: joined to the unnested input, the planner (misled by an estimate of
-- one claimed row) rescanned the whole input per row, quadratic in the batch
-- (docs/explain-plans.md). (status || '') keeps it off the partial index of
-- claimed rows: the primary key is probed per id, whatever other workers hold.
j.id = ANY($3::uuid[]) AND (j.status || '') = 'claimed' AND j.claimed_by = $2
AND j.run_count = ($4::jsonb -> (j.id::text) ->> 0)::int4

-- fragment: claim_tiers
-- The tier scans of a claim (docs/concepts/priorities.md), over the kinds of the
-- CTE open_kinds (column a, an array): `picked` holds the claimed ids. Shared by the
-- plain claim and both limited claims (flow.sql); claim_limited's scans also skip the
-- rows of full partitions (its fragment not_full, in the slot tier_filter).
--
-- One scan per tier. Tiers 1 and 2 serve both their reserved slots (their first rows)
-- and, after them, the fill (the rows after those, in priority order behind tier 0):
-- a CTE read twice is still pulled lazily, row by row, so a scan locks only the rows
-- some reader takes, and the fill goes on where the reservation stopped instead of
-- walking the tier's head again, dead entries included. A reservation that found
-- fewer rows than it asked for leaves the fill nothing of that tier: it is exhausted.
low AS (
    SELECT id FROM {prefix}jobs AS j
    WHERE status = 'pending' AND priority = 2 AND visible_at <= {now}
      AND kind = ANY((SELECT a FROM open_kinds)::text[])
-- slot: tier_filter
    ORDER BY visible_at, id LIMIT $6::int8 + $4::int8 FOR UPDATE SKIP LOCKED
), normal AS (
    SELECT id FROM {prefix}jobs AS j
    WHERE status = 'pending' AND priority = 1 AND visible_at <= {now}
      AND kind = ANY((SELECT a FROM open_kinds)::text[])
-- slot: tier_filter
    ORDER BY visible_at, id LIMIT $5::int8 + $4::int8 FOR UPDATE SKIP LOCKED
), reserved AS (
    (SELECT id FROM low LIMIT $6) UNION ALL (SELECT id FROM normal LIMIT $5)
), t0 AS (
    SELECT id FROM {prefix}jobs AS j
    WHERE status = 'pending' AND priority = 0 AND visible_at <= {now}
      AND kind = ANY((SELECT a FROM open_kinds)::text[])
-- slot: tier_filter
    ORDER BY visible_at, id LIMIT $4 FOR UPDATE SKIP LOCKED
), fill AS (
    SELECT id FROM (SELECT id FROM t0 UNION ALL (SELECT id FROM normal OFFSET $5)
                    UNION ALL (SELECT id FROM low OFFSET $6)) AS f
    LIMIT greatest($4 - (SELECT count(*) FROM reserved), 0)
), picked AS (
    SELECT id FROM reserved UNION ALL SELECT id FROM fill
)

