-- An operator's writes: cancel, redrive, cleanup and retention (venturi/store/_sql.py
-- says how these files are read).

-- name: cancel_ids
-- Cancel deletes rows (their journals go with them) and tells the owners of
-- claimed ones in the same transaction (docs/concepts/leases.md, cancellation).
WITH d AS (
    DELETE FROM {prefix}jobs WHERE id = ANY($1::uuid[]) RETURNING id, status
),
-- include: notify_cancelled

-- name: cancel_unfinished_ids
-- Cancel those of the jobs $1 that have not finished (a workflow's unfinished steps).
WITH d AS (
    DELETE FROM {prefix}jobs WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'claimed')
    RETURNING id, status
),
-- include: notify_cancelled

-- name: cancel_subject
WITH d AS (
    DELETE FROM {prefix}jobs
    WHERE
-- include: in_subtree
    RETURNING id, status
),
-- include: notify_cancelled

-- name: retry_ids
-- Redrive the dead jobs among the ids $3.
WITH dead AS (
    SELECT id FROM {prefix}jobs WHERE id = ANY($3::uuid[]) AND status = 'dead'
),
-- include: redrive

-- name: retry_kind
-- Redrive the dead jobs of kind $3, or every dead job when $3 is null.
WITH dead AS (
    SELECT id FROM {prefix}jobs WHERE status = 'dead' AND ($3::text IS NULL OR kind = $3)
),
-- include: redrive

-- name: cleanup_batch
-- One batch of cleanup; the caller repeats it until a batch comes up short.
WITH gate AS (
    SELECT true AS ok
),
-- include: delete_finished

-- name: cleanup_exclusive
-- Retention: one batch per transaction, and only by whoever wins the try-lock
-- on $5 (the prefix).
WITH gate AS (
    SELECT pg_try_advisory_xact_lock(hashtextextended('venturi:retention:' || $5::text, 0)) AS ok
),
-- include: delete_finished

-- fragment: notify_cancelled
-- After a CTE "d" (id, status) deleted jobs: the claimed ones' ids to their owners on
-- the control channel, in chunks of $2 ids (venturi/notices.py, CANCEL_CHUNK, keeps
-- each payload under NOTIFY's 8000-byte limit); the unfinished ones' ids to result()
-- waiters (notify_finished: they read the job gone, cancelled). Returns how many
-- were removed.
finished AS (
    SELECT id FROM d WHERE status IN ('pending', 'claimed')
),
-- include: notify_finished
, c AS (
    SELECT (row_number() OVER () - 1) / $2::int AS chunk, id FROM d WHERE status = 'claimed'
), n AS (
    SELECT pg_notify('{prefix}control',
                     json_build_object('op', 'cancel', 'ids', json_agg(id))::text) AS sent
    FROM c GROUP BY chunk
)
SELECT (SELECT count(*) FROM d) AS removed, (SELECT count(*) FROM n) AS notified,
       (SELECT n FROM finished_sent) AS announced,
       -- The store's clock ($3, else the database's) for the jobs table's trigger, which
       -- fails or releases the dependents of the unfinished jobs removed, after this
       -- SELECT (sql/0004_results.sql): transaction-local.
       (SELECT set_config('venturi.clock', coalesce($3::timestamptz, now())::text, true))

-- fragment: redrive
-- venturi.store.lifecycle.REDRIVE for the jobs a CTE "dead" (id) selected: pending
-- again, visible now, a fresh failure budget, journal "redriven" noted $2. A periodic
-- kind that already has a live occurrence is skipped (only one may be live:
-- docs/concepts/periodic.md); among several dead occurrences of one kind only the
-- oldest selected is redriven, as MemoryStore does. Returns how many were redriven.
-- A job enqueued after others waits again for those of them still pending or claimed
-- (docs/concepts/workflows.md); the dependents that died of a redriven job come back
-- by the jobs table's trigger (sql/0004_results.sql).
r AS (
    UPDATE {prefix}jobs AS j SET status = 'pending', failure_count = 0, finished_at = NULL,
                                 visible_at = CASE WHEN w.n > 0
                                     THEN '9999-12-31 00:00:00+00'::timestamptz ELSE {now} END,
                                 waiting = w.n
    FROM (SELECT d.id, (SELECT count(*) FROM {prefix}dependencies AS p
                        JOIN {prefix}jobs AS pj ON pj.id = p.after_id
                        WHERE p.job_id = d.id AND pj.status IN ('pending', 'claimed')) AS n
          FROM dead AS d) AS w
    WHERE j.id = w.id AND j.status = 'dead'
      AND NOT (j.periodic AND EXISTS (
          SELECT 1 FROM {prefix}jobs AS o
          WHERE o.kind = j.kind AND o.periodic AND (o.status IN ('pending', 'claimed')
                OR (o.id IN (SELECT id FROM dead) AND o.id < j.id))))
    RETURNING j.id, j.kind, j.run_count, j.visible_at
),
-- Its count recomputed above, on its own row (sql/0008_workflows_fanin.sql).
unshard AS (
    UPDATE {prefix}dependencies SET shard = NULL
    WHERE job_id IN (SELECT id FROM r) AND shard IS NOT NULL
), unshards AS (
    DELETE FROM {prefix}dependency_shards WHERE job_id IN (SELECT id FROM r)
), entries AS (
    INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, {now}, 'redriven', $2::text FROM r
), pending AS (
    SELECT kind, visible_at FROM r
),
-- include: wake_pending
SELECT (SELECT count(*) FROM r) AS redriven, (SELECT n FROM wake) AS woke

-- fragment: delete_finished
-- Deletes, when a CTE "gate" (ok) allows, up to $4 jobs finished before $1 with a
-- status in $2 (and of kind $3, unless null), oldest first; their journals go too
-- (the table's delete trigger). Bounded batches keep each delete a short
-- transaction. The victims reach the DELETE as an array, one primary-key probe
-- each: joined instead, they let the planner hash-join a sequential scan of the
-- whole table (docs/explain-plans.md). Returns whether the gate allowed it and how
-- many went.
victims AS (
    SELECT id FROM {prefix}jobs
    WHERE (SELECT ok FROM gate)
      AND finished_at < $1 AND status = ANY($2::text[]) AND ($3::text IS NULL OR kind = $3)
    ORDER BY finished_at
    LIMIT $4
), d AS (
    DELETE FROM {prefix}jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT id FROM victims)) AND j.finished_at IS NOT NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM d), (SELECT ok FROM gate)
