-- venturi schema, version 8: a large fan-in counted through shards; a workflow's record
-- goes with its last step. Forward-only.
--
-- A job waiting for many dependencies (a workflow's join) used to count them down on
-- its own row: every finishing dependency updated that one row, so the settles of a
-- 10,000-wide fan waited for each other's row lock and left 10,000 versions of it
-- behind (completion 481 steps/s at 10k against 3,000 at 1k: not linear,
-- benchmarks/results-workflows.md). Now a job enqueued with at least as many
-- unfinished dependencies as the store's fanin_shard_at (venturi/store/postgres/
-- producing.py) spreads them over ceil(sqrt(n)) shards, round-robin in id order (the
-- order they are claimed and finish in, so concurrent settles land on different
-- shards): each edge names its shard, a shard row counts its unfinished edges, and the
-- job's "waiting" counts its unfinished shards. A finishing dependency updates its
-- shard's row, and the job's row only when that shard closes: about sqrt(n) updates of
-- each row instead of n of one. The rule stays the same: the statement that finishes
-- the last dependency makes the job visible in its transaction. Both counters are
-- rows updated under their row lock (a settle that waited for another's re-reads the
-- count that one committed), so of two concurrent settles of the last two
-- dependencies exactly one takes each count to 0. A job with fewer dependencies, or
-- one redriven (its count recomputed), counts on its own row as before (shard NULL).
-- queue.job() reports the true number still unfinished (the fragment job_columns,
-- venturi/store/postgres/inspect.sql).
ALTER TABLE {prefix}dependencies ADD COLUMN IF NOT EXISTS shard integer;

CREATE TABLE IF NOT EXISTS {prefix}dependency_shards (
    job_id  uuid    NOT NULL,  -- the job that waits
    shard   integer NOT NULL,
    waiting integer NOT NULL,  -- its edges in this shard whose dependency has not finished
    PRIMARY KEY (job_id, shard)
) WITH (fillfactor = 50);  -- room on the page for the updates' new versions (HOT)

-- The workflow a job is a step of (queue.enqueue_workflow sets it; NULL for every other
-- job: nullable without a default, so adding it rewrites no row, and no index).
ALTER TABLE {prefix}jobs ADD COLUMN IF NOT EXISTS workflow_id uuid;

-- A job's edges and shards go with it (cancel, cleanup, retention), and so does a
-- workflow's record with its last step, in the same statement: queue.workflow(id)
-- answers as long as one of its steps is there (docs/operations/retention.md). The
-- steps still there are probed by primary key (the record lists them), and only for
-- the workflows the statement removed steps of.
CREATE OR REPLACE FUNCTION {prefix}dependencies_follow_jobs() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    wf uuid;
BEGIN
    DELETE FROM {prefix}dependencies WHERE job_id IN (SELECT id FROM gone);
    DELETE FROM {prefix}dependency_shards WHERE job_id IN (SELECT id FROM gone);
    FOR wf IN SELECT DISTINCT workflow_id FROM gone WHERE workflow_id IS NOT NULL LOOP
        DELETE FROM {prefix}workflows AS w WHERE w.id = wf AND NOT EXISTS (
            SELECT 1 FROM {prefix}jobs AS j
            WHERE j.id = ANY (ARRAY(SELECT (s ->> 1)::uuid
                                    FROM jsonb_array_elements(w.steps) AS s)));
    END LOOP;
    RETURN NULL;
END
$fn$;

-- sql/0004_results.sql's function, with the shards: what changed is marked "shards".
CREATE OR REPLACE FUNCTION {prefix}follow_dependencies() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    parent uuid;
    at timestamptz;
    failed boolean;
    kinds text[];
    ids uuid[];
    direct uuid[];
    sharded uuid[];
    shard_nos integer[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- A cancel: the time its statement set (the store's clock), else the database's.
        parent := OLD.id; failed := true;
        at := coalesce(nullif(current_setting('venturi.clock', true), '')::timestamptz, now());
    ELSE
        parent := NEW.id; at := coalesce(NEW.finished_at, now());
        IF NEW.status = 'pending' THEN  -- redriven
            WITH back AS (
                UPDATE {prefix}jobs AS j SET
                    status = 'pending', finished_at = NULL, failure_count = 0,
                    visible_at = '9999-12-31 00:00:00+00',
                    waiting = (SELECT count(*) FROM {prefix}dependencies AS p
                               LEFT JOIN {prefix}jobs AS pj ON pj.id = p.after_id
                               WHERE p.job_id = j.id
                                 AND pj.status IS DISTINCT FROM 'completed')
                FROM {prefix}dependencies AS e
                WHERE e.after_id = parent AND j.id = e.job_id AND NOT e.run_on_failure
                  AND j.status = 'dead'
                  AND (SELECT note FROM {prefix}journal WHERE job_id = j.id
                       ORDER BY id DESC LIMIT 1) = 'dependency-failed'
                  -- not while another of its dependencies is dead or gone
                  AND NOT EXISTS (
                      SELECT 1 FROM {prefix}dependencies AS o
                      LEFT JOIN {prefix}jobs AS oj ON oj.id = o.after_id
                      WHERE o.job_id = j.id AND o.after_id <> parent
                        AND (oj.id IS NULL OR oj.status = 'dead'))
                RETURNING j.id, j.kind, j.run_count
            ), entries AS (
                INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note)
                SELECT id, kind, run_count, NEW.visible_at, 'redriven', 'dependency-redriven'
                FROM back
            )
            SELECT array_agg(id) INTO ids FROM back;
            -- shards: those back count on their own rows (the count just recomputed)
            UPDATE {prefix}dependencies SET shard = NULL
            WHERE job_id = ANY (ids) AND shard IS NOT NULL;
            DELETE FROM {prefix}dependency_shards WHERE job_id = ANY (ids);
            -- Its after_failure="run" dependents not run yet counted its death as done:
            -- they wait for it again (shards: on their own rows, this edge out of its shard).
            WITH again AS (
                UPDATE {prefix}jobs AS j SET
                    waiting = j.waiting + 1, visible_at = '9999-12-31 00:00:00+00'
                FROM {prefix}dependencies AS e
                WHERE e.after_id = parent AND j.id = e.job_id AND e.run_on_failure
                  AND j.status = 'pending'
                RETURNING j.id
            )
            UPDATE {prefix}dependencies AS e SET shard = NULL
            FROM again WHERE e.after_id = parent AND e.job_id = again.id
              AND e.shard IS NOT NULL;
            RETURN NULL;
        END IF;
        failed := NEW.status = 'dead';
    END IF;

    -- Dependents that move on: the count down by one, visible when it reaches 0.
    -- shards: an edge in a shard counts down its shard's row, and the job's row only
    -- when that shard reaches 0. Each step reaches its rows by primary key from the
    -- ids the previous one read: joined to the jobs table instead, a statement let the
    -- planner start from every pending job (the claim index), a scan of the whole fan
    -- for each of its settles (benchmarks/results-workflows.md).
    SELECT coalesce(array_agg(job_id) FILTER (WHERE shard IS NULL), '{}'),
           coalesce(array_agg(job_id) FILTER (WHERE shard IS NOT NULL), '{}'),
           coalesce(array_agg(shard) FILTER (WHERE shard IS NOT NULL), '{}')
      INTO direct, sharded, shard_nos
      FROM {prefix}dependencies
     WHERE after_id = parent AND (NOT failed OR run_on_failure);
    IF cardinality(sharded) > 0 THEN
        WITH closed AS (
            UPDATE {prefix}dependency_shards AS s SET waiting = s.waiting - 1
            FROM unnest(sharded, shard_nos) AS e(job_id, shard)
            WHERE s.job_id = e.job_id AND s.shard = e.shard AND s.waiting > 0
            RETURNING s.job_id, s.waiting
        )
        SELECT direct || coalesce(array_agg(job_id) FILTER (WHERE waiting = 0), '{}')
          INTO direct FROM closed;
    END IF;
    WITH moved AS (
        UPDATE {prefix}jobs AS j SET
            waiting = j.waiting - 1,
            visible_at = CASE WHEN j.waiting = 1 THEN at ELSE j.visible_at END
        WHERE j.id = ANY (direct) AND j.status = 'pending' AND j.waiting > 0
        RETURNING j.kind, j.waiting
    )
    SELECT array_agg(DISTINCT kind) FILTER (WHERE waiting = 0) INTO kinds FROM moved;
    PERFORM pg_notify('{prefix}jobs', k) FROM unnest(kinds) AS k;

    IF failed THEN
        WITH doomed AS (
            UPDATE {prefix}jobs AS j SET status = 'dead', finished_at = at, waiting = 0
            WHERE j.id = ANY (ARRAY(SELECT job_id FROM {prefix}dependencies
                                    WHERE after_id = parent AND NOT run_on_failure))
              AND j.status = 'pending' AND j.waiting > 0
            RETURNING j.id, j.kind, j.run_count
        ), entries AS (
            INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note)
            SELECT id, kind, run_count, at, 'dead', 'dependency-failed' FROM doomed
        )
        SELECT array_agg(id) INTO ids FROM doomed;
        -- result() waiters of each (venturi/notices.py: ids, comma-separated)
        PERFORM pg_notify('{prefix}results', array_to_string(ids[n:n + 99], ','))
        FROM generate_series(1, coalesce(array_length(ids, 1), 0), 100) AS n;
    END IF;
    RETURN NULL;
END
$fn$;
