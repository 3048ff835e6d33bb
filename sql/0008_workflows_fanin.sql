-- venturi schema, version 8: a large fan-in counted through shards. Forward-only.
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

-- A job's edges and shards go with it (cancel, cleanup, retention).
CREATE OR REPLACE FUNCTION {prefix}dependencies_follow_jobs() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {prefix}dependencies WHERE job_id IN (SELECT id FROM gone);
    DELETE FROM {prefix}dependency_shards WHERE job_id IN (SELECT id FROM gone);
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
    -- when that shard reaches 0.
    WITH edges AS (
        SELECT e.job_id, e.shard FROM {prefix}dependencies AS e
        JOIN {prefix}jobs AS j ON j.id = e.job_id
        WHERE e.after_id = parent AND j.status = 'pending' AND j.waiting > 0
          AND (NOT failed OR e.run_on_failure)
    ), closed AS (
        UPDATE {prefix}dependency_shards AS s SET waiting = s.waiting - 1
        FROM edges AS e
        WHERE s.job_id = e.job_id AND s.shard = e.shard AND s.waiting > 0
        RETURNING s.job_id, s.waiting
    ), down AS (
        SELECT job_id FROM edges WHERE shard IS NULL
        UNION ALL
        SELECT job_id FROM closed WHERE waiting = 0
    ), moved AS (
        UPDATE {prefix}jobs AS j SET
            waiting = j.waiting - 1,
            visible_at = CASE WHEN j.waiting = 1 THEN at ELSE j.visible_at END
        FROM down
        WHERE j.id = down.job_id AND j.status = 'pending' AND j.waiting > 0
        RETURNING j.kind, j.waiting
    )
    SELECT array_agg(DISTINCT kind) FILTER (WHERE waiting = 0) INTO kinds FROM moved;
    PERFORM pg_notify('{prefix}jobs', k) FROM unnest(kinds) AS k;

    IF failed THEN
        WITH doomed AS (
            UPDATE {prefix}jobs AS j SET status = 'dead', finished_at = at, waiting = 0
            FROM {prefix}dependencies AS e
            WHERE e.after_id = parent AND j.id = e.job_id AND NOT e.run_on_failure
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
