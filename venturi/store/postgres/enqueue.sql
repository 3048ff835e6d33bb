-- Inserting jobs, dedup and merge, periodic seeds (venturi/store/_sql.py says how
-- these files are read). Every insert sends its wake-up (venturi/notices.py:
-- "kind", or "kind|epoch" for a job due later) in the same statement, so it is
-- delivered when the insert commits.

-- name: insert_one
-- One row, one round trip. The wake-up is computed in RETURNING: no CTE to
-- materialise and scan back (docs/benchmarks.md, producer paths).
-- prepared: it reads no table; planning it on every call cost 11 % of an enqueue
INSERT INTO {prefix}jobs (id, kind, payload, priority, created_at, visible_at,
                          max_failures, carry, dedup_key, subject, periodic, trace_context,
                          limit_key)
VALUES ($2, $3, $4::text::jsonb, $5, {now}, coalesce($7::timestamptz, {now} + $6::interval),
        $8, $9::text::jsonb, $10, $11, $12, $13::text::jsonb, $14)
RETURNING
-- include: job_notice

-- name: insert_now
-- insert_one for the usual job: visible at once, and no column but the task's own
-- (no carry, dedup key, subject, limit key, trace context; not periodic). Nothing to
-- compute, and its wake-up is its kind (benchmarks/results-enqueue.md).
-- prepared: it reads no table
INSERT INTO {prefix}jobs (id, kind, payload, priority, created_at, visible_at, max_failures)
VALUES ($2, $3, $4::text::jsonb, $5, {now}, {now}, $6)
RETURNING pg_notify('{prefix}jobs', kind)

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

-- name: insert_batch
-- enqueue_batch's plain jobs (visible at once, one trace context for all: NewJobBatch)
-- and one wake-up per kind of the batch, the kinds given ($10): nothing to collect back
-- from the insert and group, which cost a batch of 1,000 about as much as building it
-- (benchmarks/results-enqueue.md). A WITH that modifies data runs to completion whether
-- or not the query reads it.
-- prepared: it reads no table
WITH pending AS (
    INSERT INTO {prefix}jobs (id, kind, payload, priority, created_at, visible_at,
                              max_failures, subject, periodic, trace_context)
    SELECT i.id, i.kind, i.payload::jsonb, i.priority, {now}, {now}, i.max_failures,
           i.subject, coalesce(i.periodic, false), $9::text::jsonb
    FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int2[], $6::int4[], $7::text[],
                $8::bool[])
         AS i(id, kind, payload, priority, max_failures, subject, periodic)
)
SELECT pg_notify('{prefix}jobs', k) FROM unnest($10::text[]) AS k

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

-- name: dedup_locks
-- The same locks for every key of a batch at once, in the order of their lock ids: two
-- batches of the same keys in different orders would otherwise each hold one and wait
-- for the other (a deadlock). The subquery's ORDER BY keeps it from being pulled up, so
-- the locks are taken in that order.
SELECT count(pg_advisory_xact_lock(h))
FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest($1::text[]) AS k ORDER BY h) AS s

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

-- name: insert_waiting
-- Jobs of which some wait for others (docs/concepts/workflows.md), in one statement:
-- $2.. the rows as insert_many's, $14 the edges [[job, dependency], ...], $15 each
-- row's after_failure="run", $16 its limit_key, $17 the fan-in counted in shards and
-- $18 the workflow of every row (NULL outside enqueue_workflow). A dependency outside the batch is locked (in id order, as
-- settles lock theirs) and marked has_dependents, and its status read as that lock
-- leaves it: finished before, it counts as done (or failed); finishing after, its
-- settle's trigger sees this job (sql/0004_results.sql). A dependency inside the batch
-- is new, so unfinished. A row with a failed dependency (dead, or gone: cancelled, or
-- never there) and no after_failure="run" goes in dead, noted dependency-failed, and so
-- do its dependents in the batch; every other row waits (visible at 9999-12-31) for
-- its unfinished dependencies, or is visible as asked when none is left.
WITH RECURSIVE input AS (
    SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int2[], $6::interval[],
                         $7::timestamptz[], $8::int4[], $9::text[], $10::text[], $11::text[],
                         $12::bool[], $13::text[], $15::bool[], $16::text[])
         AS i(id, kind, payload, priority, delay, at, max_failures, carry, dedup_key, subject,
              periodic, trace_context, run_on_failure, limit_key)
), edges AS (
    SELECT (e ->> 0)::uuid AS job_id, (e ->> 1)::uuid AS after_id
    FROM jsonb_array_elements($14::jsonb) AS e
), outside AS (
    SELECT j.id FROM {prefix}jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT after_id FROM edges
                            WHERE after_id NOT IN (SELECT id FROM input)))
    ORDER BY j.id
    FOR UPDATE
), parents AS (
    UPDATE {prefix}jobs AS p SET has_dependents = true
    FROM outside WHERE p.id = outside.id
    RETURNING p.id, p.status, p.kind, p.visible_at
), doomed (id) AS (
    SELECT e.job_id FROM edges AS e JOIN input AS i ON i.id = e.job_id
    LEFT JOIN parents AS pa ON pa.id = e.after_id
    WHERE NOT coalesce(i.run_on_failure, false)
      AND e.after_id NOT IN (SELECT id FROM input)
      AND (pa.id IS NULL OR pa.status = 'dead')
    UNION
    SELECT e.job_id FROM doomed AS d JOIN edges AS e ON e.after_id = d.id
    JOIN input AS i ON i.id = e.job_id
    WHERE NOT coalesce(i.run_on_failure, false)
), open_edges AS (
    SELECT e.job_id, e.after_id FROM edges AS e LEFT JOIN parents AS pa ON pa.id = e.after_id
    WHERE (e.after_id IN (SELECT id FROM input) AND e.after_id NOT IN (SELECT id FROM doomed))
       OR pa.status IN ('pending', 'claimed')
), unfinished AS (
    -- From $17 unfinished dependencies on, in ceil(sqrt(n)) shards (sql/0008_workflows_fanin.sql)
    SELECT job_id, count(*) AS n,
           CASE WHEN count(*) >= $17::int4 THEN ceil(sqrt(count(*)))::int4 END AS shards
    FROM open_edges GROUP BY job_id
), placed AS (
    SELECT o.job_id, o.after_id,
           ((row_number() OVER (PARTITION BY o.job_id ORDER BY o.after_id) - 1) % u.shards)::int4
               AS shard
    FROM open_edges AS o JOIN unfinished AS u ON u.job_id = o.job_id
    WHERE u.shards IS NOT NULL AND o.job_id NOT IN (SELECT id FROM doomed)
), shard_rows AS (
    INSERT INTO {prefix}dependency_shards (job_id, shard, waiting)
    SELECT job_id, shard, count(*) FROM placed GROUP BY job_id, shard
), ins AS (
    INSERT INTO {prefix}jobs (id, kind, payload, priority, created_at, visible_at,
                              max_failures, carry, dedup_key, subject, periodic, trace_context,
                              limit_key, status, finished_at, waiting, has_dependents,
                              workflow_id)
    SELECT i.id, i.kind, i.payload::jsonb, i.priority, {now},
           CASE WHEN i.id IN (SELECT id FROM doomed) THEN {now}
                WHEN u.n > 0 THEN '9999-12-31 00:00:00+00'::timestamptz
                ELSE coalesce(i.at, {now} + coalesce(i.delay, interval '0')) END,
           i.max_failures, i.carry::jsonb, i.dedup_key, i.subject, coalesce(i.periodic, false),
           i.trace_context::jsonb, i.limit_key,
           CASE WHEN i.id IN (SELECT id FROM doomed) THEN 'dead' ELSE 'pending' END,
           CASE WHEN i.id IN (SELECT id FROM doomed) THEN {now} END,
           CASE WHEN i.id IN (SELECT id FROM doomed) THEN 0
                ELSE coalesce(u.shards, u.n, 0) END,
           i.id IN (SELECT after_id FROM edges), $18::uuid
    FROM input AS i LEFT JOIN unfinished AS u ON u.job_id = i.id
    RETURNING id, kind, status, visible_at, run_count
), links AS (
    INSERT INTO {prefix}dependencies (after_id, job_id, run_on_failure, shard)
    SELECT DISTINCT e.after_id, e.job_id, coalesce(i.run_on_failure, false), p.shard
    FROM edges AS e JOIN input AS i ON i.id = e.job_id
    LEFT JOIN placed AS p ON p.job_id = e.job_id AND p.after_id = e.after_id
), failed AS (
    INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, {now}, 'dead', 'dependency-failed' FROM ins WHERE status = 'dead'
    RETURNING job_id
), pending AS (
    SELECT kind, visible_at FROM ins
    WHERE status = 'pending' AND visible_at < '9999-12-31 00:00:00+00'::timestamptz
    -- A pending dependency was locked above: a claim meanwhile skipped it (SKIP LOCKED)
    -- and may have come back short, its worker then waiting for a wake-up. Announced
    -- again, sent at commit once the lock is gone (as watch_job does, inspect.sql).
    UNION ALL
    SELECT kind, visible_at FROM parents
    WHERE status = 'pending' AND visible_at < '9999-12-31 00:00:00+00'::timestamptz
),
-- include: wake_pending
SELECT (SELECT n FROM wake), (SELECT count(*) FROM failed)

-- name: insert_workflow
-- A workflow's record, in the transaction that inserts its steps (insert_waiting).
INSERT INTO {prefix}workflows (id, name, created_at, steps) VALUES ($2, $3, {now}, $4::jsonb)
