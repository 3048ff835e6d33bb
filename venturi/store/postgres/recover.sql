-- Taking claims back (venturi/store/_sql.py says how these files are read):
-- detection is timeout-only, identical on one host or many (docs/concepts/leases.md).

-- name: find_stale
-- Claims whose lease has expired, oldest expiry first.
SELECT
-- include: job_columns
FROM {prefix}jobs AS j
WHERE status = 'claimed' AND claim_expires_at < {now}
ORDER BY claim_expires_at, id
LIMIT $2

-- name: recover
-- One expired claim, guarded by the epoch the caller observed ($3, $4): a claim
-- reclaimed since is left alone.
WITH stale AS (
    SELECT id, claimed_by FROM {prefix}jobs
    WHERE id = $3 AND run_count = $4 AND status = 'claimed' AND claim_expires_at < {now}
    FOR UPDATE SKIP LOCKED
),
-- include: recover_claims

-- name: recover_stale
-- The reaper's sweep: up to $3 expired claims, oldest expiry first, in one statement.
WITH stale AS (
    SELECT id, claimed_by FROM {prefix}jobs
    WHERE status = 'claimed' AND claim_expires_at < {now}
    ORDER BY claim_expires_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
),
-- include: recover_claims

-- name: recover_boot
-- Claims of an earlier boot of worker $3 ("$3/{other boot}", not $4 itself), taken
-- back at once: that boot is gone, since we hold the name's lock (identity_lock).
WITH stale AS (
    SELECT id, claimed_by FROM {prefix}jobs
    WHERE status = 'claimed'
      AND left(claimed_by, length($3::text) + 1) = $3::text || '/'
      AND strpos(substr(claimed_by, length($3::text) + 2), '/') = 0
      AND claimed_by <> $4
    FOR UPDATE SKIP LOCKED
),
-- include: recover_claims

-- fragment: recover_claims
-- venturi.store.lifecycle.recover for the claims a CTE "stale" (id, claimed_by)
-- locked: a failure counted, visible at once, dead when that spends the budget
-- (failure_count + 1 reaches max_failures); one journal entry each, noted $2 (a
-- lifecycle.Recovery); wake-ups for the kinds re-pended. Returns each recovered
-- claim's id, kind, run number, new status and former owner.
r AS (
    UPDATE {prefix}jobs AS j SET
        status = CASE WHEN j.failure_count + 1 >= j.max_failures THEN 'dead' ELSE 'pending' END,
        finished_at = CASE WHEN j.failure_count + 1 >= j.max_failures THEN {now} END,
        failure_count = j.failure_count + 1,
        visible_at = {now}, claimed_by = NULL, claim_expires_at = NULL
    FROM stale AS s WHERE j.id = s.id
    RETURNING j.id, j.kind, j.run_count, j.status, j.visible_at, s.claimed_by
), entries AS (
    INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, {now},
           CASE WHEN status = 'dead' THEN 'dead' ELSE 'stale-recovered' END, $2::text
    FROM r
), pending AS (
    SELECT kind, visible_at FROM r WHERE status = 'pending'
), finished AS (
    SELECT id FROM r WHERE status = 'dead'
),
-- include: notify_finished
,
-- include: wake_pending
SELECT id, kind, run_count, status, claimed_by, (SELECT n FROM wake) AS woke,
       (SELECT n FROM finished_sent) AS announced FROM r
