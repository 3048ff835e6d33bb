-- Inserting jobs, dedup and merge, periodic seeds (venturi/store/_sql.py says how
-- these files are read). Every insert sends its wake-up (venturi/notices.py:
-- "kind", or "kind|epoch" for a job due later) in the same statement, so it is
-- delivered when the insert commits.

-- name: insert_one
-- One row, one round trip. The wake-up is computed in RETURNING: no CTE to
-- materialise and scan back (docs/benchmarks.md, producer paths).
INSERT INTO {prefix}jobs (id, kind, payload, priority, created_at, visible_at,
                          max_failures, carry, dedup_key, subject, periodic, trace_context,
                          limit_key)
VALUES ($2, $3, $4::text::jsonb, $5, {now}, coalesce($7::timestamptz, {now} + $6::interval),
        $8, $9::text::jsonb, $10, $11, $12, $13::text::jsonb, $14)
RETURNING
-- include: job_notice

-- name: insert_many
-- A whole family in one statement: unnest keeps it one plan for any batch size.
-- An optional column may come as one NULL array (unnest pads it with NULLs).
WITH pending AS (
    INSERT INTO {prefix}jobs (id, kind, payload, priority, created_at, visible_at,
                              max_failures, carry, dedup_key, subject, periodic, trace_context,
                              limit_key)
    SELECT i.id, i.kind, i.payload::jsonb, i.priority, {now},
           coalesce(i.at, {now} + coalesce(i.delay, interval '0')),
           i.max_failures, i.carry::jsonb, i.dedup_key, i.subject, coalesce(i.periodic, false),
           i.trace_context::jsonb, i.limit_key
    FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int2[], $6::interval[],
                $7::timestamptz[], $8::int4[], $9::text[], $10::text[], $11::text[], $12::bool[],
                $13::text[], $14::text[])
         AS i(id, kind, payload, priority, delay, at, max_failures, carry, dedup_key, subject,
              periodic, trace_context, limit_key)
    RETURNING kind, visible_at
),
-- include: wake_pending
SELECT n FROM wake

-- name: notify_kinds
-- After a COPY (which has no RETURNING): one wake-up per kind, sent at commit.
SELECT pg_notify('{prefix}jobs', k) FROM unnest($1::text[]) AS k

-- name: seed_periodic
-- The unique periodic index turns a second seed into a no-op
-- (docs/concepts/periodic.md).
WITH ins AS (
    INSERT INTO {prefix}jobs (id, kind, payload, priority, created_at, visible_at,
                              max_failures, periodic, trace_context)
    SELECT i.id, i.kind, i.payload::jsonb, i.priority, {now}, coalesce(i.at, {now}),
           i.max_failures, true, i.trace_context::jsonb
    FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int2[], $6::timestamptz[], $7::int4[],
                $8::text[])
         AS i(id, kind, payload, priority, at, max_failures, trace_context)
    ON CONFLICT DO NOTHING
    RETURNING kind
)
SELECT count(*) FROM ins

-- name: dedup_lock
-- Serializes enqueuers of one (prefix, kind, key) until their commit
-- (docs/concepts/dedup.md).
SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))

-- name: dedup_candidate
-- The oldest pending sibling, locked so a claimer cannot take it mid-merge.
SELECT
-- include: job_columns
FROM {prefix}jobs AS j
WHERE kind = $1 AND dedup_key = $2 AND status = 'pending'
ORDER BY created_at, id
LIMIT 1
FOR UPDATE

-- name: merge_into
-- venturi.store.lifecycle.MERGE: guarded on still pending, visible no later than
-- before, journaled (merged) at the job's current run count.
WITH m AS (
    UPDATE {prefix}jobs SET
        payload = coalesce($3::text::jsonb, payload),
        priority = coalesce($4::int2, priority),
        carry = CASE WHEN $5::bool THEN $6::text::jsonb ELSE carry END,
        visible_at = least(visible_at, coalesce($7::timestamptz, {now} + $8::interval))
    WHERE id = $2 AND status = 'pending'
    RETURNING id, kind, run_count, visible_at
), j AS (
    INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, {now}, 'merged', $9 FROM m
)
SELECT count(
-- include: job_notice
) FROM m

-- fragment: job_notice
-- venturi/notices.py's wake-up for one job, from its columns kind and visible_at:
-- the kind when it is runnable now, else "kind|epoch" of when it will be.
pg_notify('{prefix}jobs', CASE WHEN visible_at > {now}
                               THEN kind || '|' || extract(epoch FROM visible_at)::text
                               ELSE kind END)

-- fragment: wake_pending
-- A CTE "wake" (n) sending the wake-ups for the jobs of a CTE "pending" (kind,
-- visible_at): per kind, the kind when some are runnable now, and "kind|epoch" of
-- the earliest due later, so idle workers arm their timers without a query.
wake AS (
    SELECT count(pg_notify('{prefix}jobs', CASE WHEN k.later
                                                THEN k.kind || '|' || extract(epoch FROM k.first)::text
                                                ELSE k.kind END)) AS n
    FROM (SELECT kind, visible_at > {now} AS later, min(visible_at) AS first
          FROM pending GROUP BY kind, visible_at > {now}) AS k
)
