-- Reading the queue (venturi/store/_sql.py says how these files are read).

-- name: job
SELECT
-- include: job_columns
FROM {prefix}jobs AS j WHERE id = $1

-- name: journal
SELECT id, job_id, kind, run_no, recorded_at, outcome, note, attachment::text
FROM {prefix}journal WHERE job_id = $1 ORDER BY id

-- name: query_jobs
-- Keyset pages on the primary key (UUIDv7 ids are time-ordered): a deep page
-- starts at its cursor instead of skipping rows.
SELECT
-- include: job_columns
FROM {prefix}jobs AS j
WHERE id < coalesce($5::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
  AND ($1::text IS NULL OR kind = $1)
  AND ($2::text IS NULL OR status = $2)
  AND ($3::timestamptz IS NULL OR finished_at >= $3)
  AND ($4::timestamptz IS NULL OR finished_at < $4)
ORDER BY id DESC
LIMIT $6

-- name: count_subject
SELECT count(*) FROM {prefix}jobs
WHERE
-- include: in_subtree
  AND ($2::text IS NULL OR kind = $2)
  AND status = ANY($3::text[])

-- name: count_kind
SELECT count(*) FROM {prefix}jobs WHERE kind = $1 AND status = ANY($2::text[])

-- name: count_all
SELECT count(*) FROM {prefix}jobs WHERE status = ANY($1::text[])

-- name: stats_active
SELECT kind, status, visible_at <= {now} AS runnable, count(*) AS n,
       min(visible_at) FILTER (WHERE visible_at <= {now}) AS oldest_visible
FROM {prefix}jobs
WHERE status IN ('pending', 'claimed')
GROUP BY kind, status, runnable

-- name: stats_dead
SELECT kind, count(*) AS n FROM {prefix}jobs WHERE status = 'dead' GROUP BY kind

-- name: stats_finished
SELECT count(*) FROM {prefix}jobs WHERE finished_at IS NOT NULL

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
j.max_failures, j.carry::text, j.dedup_key, j.subject, j.periodic, j.trace_context::text

-- fragment: in_subtree
-- The subject $1's literal subtree: the subject itself or anything below
-- "subject/", as a byte range on the C-collated index (no LIKE, so % and _ are
-- ordinary characters).
(subject COLLATE "C" = $1
 OR (subject COLLATE "C" >= $1 || '/' AND subject COLLATE "C" < $1 || '0'))
