-- Reading the queue (venturi/store/_sql.py says how these files are read).

-- name: job
SELECT
-- include: job_columns
FROM {prefix}jobs AS j WHERE id = $1

-- name: watch_job
-- The job's row, flagged as awaited by a result() caller (sql/0009_awaited.sql says
-- why the settles announce only those). Always written, never "only if not yet": a
-- row this UPDATE waited for is read at its latest version, which is what makes a
-- settle that committed meanwhile visible here (a filtered UPDATE that matched nothing
-- would leave only this statement's older snapshot to read). A claim that met the row
-- locked by it skipped the row (SKIP LOCKED) and may have found nothing else: a job
-- runnable now therefore gets a wake-up on the jobs channel, sent at commit, after the
-- lock is gone. Committed without waiting for its WAL flush (set_config(..., true): this
-- transaction only): a flag lost in a server crash is written again, since the waiter's
-- LISTEN session is lost with it and every waiter reads its job again after listening
-- again (venturi/results.py).
WITH cfg AS (
    SELECT set_config('synchronous_commit', 'off', true) AS s
), w AS (
    UPDATE {prefix}jobs AS j SET awaited = true WHERE j.id = $2
    RETURNING
-- include: job_columns
    , j.status = 'pending' AND j.visible_at <= {now} AS runnable
), wake AS (
    SELECT count(pg_notify('{prefix}jobs', kind)) AS n FROM w WHERE runnable
)
SELECT w.*, wake.n, cfg.s FROM w, wake, cfg

-- name: journal
SELECT id, job_id, kind, run_no, recorded_at, outcome, note, attachment::text
FROM {prefix}journal WHERE job_id = $1 ORDER BY id

-- name: query_jobs
-- Keyset pages on the primary key (UUIDv7 ids are time-ordered): a deep page
-- starts at its cursor instead of skipping rows; $7, a lower id bound, is where
-- "created since" pages stop.
SELECT
-- include: job_columns
FROM {prefix}jobs AS j
WHERE id < coalesce($5::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
  AND id >= coalesce($7::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
  AND ($1::text IS NULL OR kind = $1)
  AND ($2::text IS NULL OR status = $2)
  AND ($3::timestamptz IS NULL OR finished_at >= $3)
  AND ($4::timestamptz IS NULL OR finished_at < $4)
ORDER BY id DESC
LIMIT $6

-- name: query_jobs_subject
-- History of subject $1's subtree, newest first by id: the subject index finds a
-- small subtree (the subject itself and its byte range); for a large one the planner
-- walks the primary key as query_jobs does.
SELECT
-- include: job_columns
FROM {prefix}jobs AS j
WHERE
-- include: in_subtree
  AND id < coalesce($6::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
  AND id >= coalesce($7::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
  AND ($2::text IS NULL OR kind = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::timestamptz IS NULL OR finished_at >= $4)
  AND ($5::timestamptz IS NULL OR finished_at < $5)
ORDER BY id DESC
LIMIT $8

-- name: dead_jobs
-- Dead jobs, most recently finished first, in the order of their own index
-- (finished_at DESC, id): a page costs its own rows however many jobs the table
-- holds. $2, $3: the last page's (finished_at, id); $4, $5: the id range.
SELECT
-- include: job_columns
FROM {prefix}jobs AS j
WHERE status = 'dead'
  AND finished_at <= coalesce($2::timestamptz, 'infinity'::timestamptz)
  AND (finished_at < coalesce($2::timestamptz, 'infinity'::timestamptz) OR id > $3::uuid)
  AND id >= coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
  AND id < coalesce($5::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
  AND ($1::text IS NULL OR kind = $1)
ORDER BY finished_at DESC, id
LIMIT $6

-- name: claimed_jobs
-- Claimed jobs, the soonest lease expiry first, on the expiry index. $2, $3: the last
-- page's (claim_expires_at, id); $4, $5: the id range.
SELECT
-- include: job_columns
FROM {prefix}jobs AS j
WHERE status = 'claimed'
  AND claim_expires_at >= coalesce($2::timestamptz, '-infinity'::timestamptz)
  AND (claim_expires_at > coalesce($2::timestamptz, '-infinity'::timestamptz) OR id > $3::uuid)
  AND id >= coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
  AND id < coalesce($5::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
  AND ($1::text IS NULL OR kind = $1)
ORDER BY claim_expires_at, id
LIMIT $6

-- name: periodic_jobs
-- Each periodic kind's live occurrence: the unique periodic index holds exactly those
-- (docs/concepts/periodic.md).
SELECT
-- include: job_columns
FROM {prefix}jobs AS j
WHERE periodic AND status IN ('pending', 'claimed')
ORDER BY kind

-- name: finished_per_minute
-- Jobs finished in [$1, $2) per minute and kind, from the finished jobs' index; at
-- most the $3 most recent of them are read, so a busy hour costs a bounded read.
SELECT date_bin('1 minute', finished_at, '2000-01-01 00:00:00+00'::timestamptz) AS minute,
       kind, count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status = 'dead') AS dead
FROM (SELECT finished_at, kind, status FROM {prefix}jobs
      WHERE finished_at >= $1::timestamptz AND finished_at < $2::timestamptz
      ORDER BY finished_at DESC
      LIMIT $3) AS recent
GROUP BY 1, 2
ORDER BY 1, 2

-- name: count_subject
-- Counting stops at $6 rows (null: counts all): a page that only needs to know
-- whether there are more than N pays for N.
SELECT count(*) FROM (
    SELECT 1 FROM {prefix}jobs
    WHERE
-- include: in_subtree
      AND ($2::text IS NULL OR kind = $2)
      AND status = ANY($3::text[])
      AND id >= coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
      AND id < coalesce($5::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
    LIMIT $6
) AS capped

-- name: count_between
-- Jobs created in an id range (UUIDv7: a time range), on the primary key; counting
-- stops at $5 rows.
SELECT count(*) FROM (
    SELECT 1 FROM {prefix}jobs
    WHERE id >= coalesce($3::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
      AND id < coalesce($4::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
      AND ($1::text IS NULL OR kind = $1)
      AND status = ANY($2::text[])
    LIMIT $5
) AS capped

-- name: count_status
-- Pending jobs on the claim index, claimed ones on the expiry index (each literal
-- status matches its partial index, in a generic plan too), finished ones from the
-- tally: nothing reads the finished rows. A status not asked for is not read.
SELECT
    (SELECT count(*) FROM {prefix}jobs
     WHERE status = 'pending' AND 'pending' = ANY($2::text[]) AND ($1::text IS NULL OR kind = $1))
  + (SELECT count(*) FROM {prefix}jobs
     WHERE status = 'claimed' AND 'claimed' = ANY($2::text[]) AND ($1::text IS NULL OR kind = $1))
  + (SELECT coalesce(sum(n), 0)::bigint FROM {prefix}tallies
     WHERE status = ANY($2::text[]) AND ($1::text IS NULL OR kind = $1))

-- name: stats
-- One statement, one snapshot: pending jobs by kind on the claim index (runnable or
-- not, and the oldest runnable one's visible time), claimed ones on the expiry index,
-- finished ones from the tally (sql/0006_tallies.sql). Its cost grows with the pending
-- and claimed jobs, not with the finished ones.
SELECT 'pending' AS part, kind, visible_at <= {now} AS runnable, count(*) AS n,
       min(visible_at) FILTER (WHERE visible_at <= {now}) AS oldest, 0::bigint AS entered
FROM {prefix}jobs WHERE status = 'pending'
GROUP BY kind, runnable
UNION ALL
SELECT 'claimed', kind, NULL, count(*), NULL, 0::bigint FROM {prefix}jobs WHERE status = 'claimed'
GROUP BY kind
UNION ALL
SELECT status, kind, NULL, sum(n)::bigint, NULL, sum(entered)::bigint FROM {prefix}tallies
GROUP BY status, kind

-- name: oldest_runnable
SELECT {now} - least(
    (SELECT visible_at FROM {prefix}jobs WHERE status = 'pending' AND priority = 0
        AND visible_at <= {now} ORDER BY visible_at LIMIT 1),
    (SELECT visible_at FROM {prefix}jobs WHERE status = 'pending' AND priority = 1
        AND visible_at <= {now} ORDER BY visible_at LIMIT 1),
    (SELECT visible_at FROM {prefix}jobs WHERE status = 'pending' AND priority = 2
        AND visible_at <= {now} ORDER BY visible_at LIMIT 1))

-- name: detail_failed
SELECT j.id, j.kind, j.subject, j.finished_at,
       (SELECT e.note FROM {prefix}journal AS e
        WHERE e.job_id = j.id AND e.outcome = 'dead' ORDER BY e.id DESC LIMIT 1) AS reason
FROM {prefix}jobs AS j
WHERE j.status = 'dead'
ORDER BY j.finished_at DESC, j.id
LIMIT $1

-- fragment: job_columns
-- A job's columns, as venturi/store/postgres/rows.py reads them, of the table aliased j.
-- jsonb goes out as text whatever codec or loader the connection has (a caller's,
-- conn=, may decode jsonb its own way: SQLAlchemy's engines do).
j.id, j.kind, j.payload::text, j.priority, j.status, j.created_at, j.visible_at,
j.claim_expires_at, j.claimed_by, j.finished_at, j.run_count, j.failure_count,
j.max_failures, j.carry::text, j.dedup_key, j.subject, j.periodic, j.trace_context::text,
j.limit_key, j.result::text,
-- waiting: a job counting through shards has its open shards in j.waiting, each
-- standing for its own count (sql/0008_workflows_fanin.sql)
CASE WHEN j.waiting > 0 THEN j.waiting + coalesce(
    (SELECT sum(s.waiting) - count(*) FROM {prefix}dependency_shards AS s
     WHERE s.job_id = j.id AND s.waiting > 0), 0)::int4 ELSE j.waiting END

-- fragment: in_subtree
-- The subject $1's literal subtree: the subject itself or anything below
-- "subject/", as a byte range on the C-collated index (no LIKE, so % and _ are
-- ordinary characters).
(subject COLLATE "C" = $1
 OR (subject COLLATE "C" >= $1 || '/' AND subject COLLATE "C" < $1 || '0'))

-- name: results
-- The results of the jobs $1 that completed (ctx.results: docs/concepts/workflows.md).
SELECT id, result::text FROM {prefix}jobs WHERE id = ANY($1::uuid[]) AND status = 'completed'

-- name: dependencies
-- The jobs job $1 was enqueued after, in the order of their ids.
SELECT after_id FROM {prefix}dependencies WHERE job_id = $1 ORDER BY after_id

-- name: workflow_of
-- The workflow job $1 is a step of. Only a job with an edge either way (the
-- dependencies' primary key and dependencies_job answer that) is looked for in the
-- workflows, whose steps no index covers: that part reads the workflows table.
SELECT w.id FROM {prefix}workflows w
WHERE (EXISTS (SELECT 1 FROM {prefix}dependencies WHERE after_id = $1)
       OR EXISTS (SELECT 1 FROM {prefix}dependencies WHERE job_id = $1))
  AND w.steps @> jsonb_build_array(jsonb_build_array($1::text))
LIMIT 1

-- name: workflow
SELECT id, name, created_at, steps::text FROM {prefix}workflows WHERE id = $1

-- name: jobs_by_id
SELECT
-- include: job_columns
FROM {prefix}jobs AS j WHERE id = ANY($1::uuid[])

-- name: edges_of
-- What each of the jobs $1 waits for.
SELECT job_id, after_id FROM {prefix}dependencies WHERE job_id = ANY($1::uuid[])
