-- venturi schema, version 4: results and dependencies. Forward-only.
--
-- What a run gave ctx.set_result(value) (JSON), written by the settle that completes
-- the job, in the statement that completes it (docs/concepts/results.md). NULL for
-- every job that has not completed, or completed without setting one. Nullable
-- without a default, so adding it rewrites no row; a large value is TOASTed out of
-- line, so the row a claim scans stays narrow.
ALTER TABLE {prefix}jobs ADD COLUMN IF NOT EXISTS result jsonb;

-- Dependencies (docs/concepts/workflows.md). A job enqueued with after=[ids] waits:
-- it is pending but not visible (visible_at is WAITING, far beyond any real schedule,
-- so the claim's range scan never reaches it and its index predicate stays as it is),
-- and "waiting" counts its dependencies that have not finished yet. One row per edge
-- in {prefix}dependencies; "has_dependents" marks a job some other job waits for, so
-- the trigger below fires for those rows only (a WHEN clause, checked in C per updated
-- row: a job nobody waits for costs nothing more).
ALTER TABLE {prefix}jobs ADD COLUMN IF NOT EXISTS waiting integer NOT NULL DEFAULT 0;
ALTER TABLE {prefix}jobs ADD COLUMN IF NOT EXISTS has_dependents boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS {prefix}dependencies (
    after_id       uuid    NOT NULL,  -- the dependency
    job_id         uuid    NOT NULL,  -- the job that waits for it
    -- after_failure="run": a dead or cancelled dependency counts as finished for this job
    run_on_failure boolean NOT NULL DEFAULT false,
    PRIMARY KEY (after_id, job_id)
);
CREATE INDEX IF NOT EXISTS {prefix}dependencies_job ON {prefix}dependencies (job_id, after_id);

-- A job's edges go with it (cancel, cleanup, retention), as its journal does.
CREATE OR REPLACE FUNCTION {prefix}dependencies_follow_jobs() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {prefix}dependencies WHERE job_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS {prefix}jobs_dependencies_delete ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_dependencies_delete AFTER DELETE ON {prefix}jobs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION {prefix}dependencies_follow_jobs();

-- When a job others wait for finishes, its waiting dependents move on, in the same
-- transaction as the statement that finished it (a settle, a recovery, a cancel):
-- completed: each dependent's count goes down, and one that reaches 0 becomes visible
-- now and wakes workers; dead or cancelled: each dependent enqueued with
-- after_failure="run" moves on the same way, every other one goes dead with note
-- dependency-failed (journaled; its own dependents follow, by this same trigger);
-- redriven (dead -> pending): the dependents that died of it wait again, and so do
-- its after_failure="run" dependents that have not run yet.
--
-- Why a trigger: its statements see what committed after the finishing statement began.
-- An enqueue with after= locks its dependencies' rows (setting has_dependents) and
-- reads their status in one statement; a settle that waited for that lock sees the new
-- has_dependents, and this trigger then sees the new dependent, which a CTE of the
-- settle, on the settle's own snapshot, would not. The other way round, the enqueue
-- waits for the settle and reads the dependency finished.
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
            )
            INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note)
            SELECT id, kind, run_count, NEW.visible_at, 'redriven', 'dependency-redriven'
            FROM back;
            -- Its after_failure="run" dependents not run yet counted its death as done:
            -- they wait for it again.
            UPDATE {prefix}jobs AS j SET
                waiting = j.waiting + 1, visible_at = '9999-12-31 00:00:00+00'
            FROM {prefix}dependencies AS e
            WHERE e.after_id = parent AND j.id = e.job_id AND e.run_on_failure
              AND j.status = 'pending';
            RETURN NULL;
        END IF;
        failed := NEW.status = 'dead';
    END IF;

    -- Dependents that move on: the count down by one, visible when it reaches 0.
    WITH moved AS (
        UPDATE {prefix}jobs AS j SET
            waiting = j.waiting - 1,
            visible_at = CASE WHEN j.waiting = 1 THEN at ELSE j.visible_at END
        FROM {prefix}dependencies AS e
        WHERE e.after_id = parent AND j.id = e.job_id AND j.status = 'pending'
          AND j.waiting > 0 AND (NOT failed OR e.run_on_failure)
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

DROP TRIGGER IF EXISTS {prefix}jobs_follow_dependencies ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_follow_dependencies AFTER UPDATE ON {prefix}jobs
    FOR EACH ROW WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
                       AND (NEW.status IN ('completed', 'dead')
                            OR (OLD.status = 'dead' AND NEW.status = 'pending')))
    EXECUTE FUNCTION {prefix}follow_dependencies();
DROP TRIGGER IF EXISTS {prefix}jobs_follow_dependencies_delete ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_follow_dependencies_delete AFTER DELETE ON {prefix}jobs
    FOR EACH ROW WHEN (OLD.has_dependents AND OLD.status IN ('pending', 'claimed'))
    EXECUTE FUNCTION {prefix}follow_dependencies();

-- Workflows (docs/concepts/workflows.md): a DAG enqueued at once. Its steps are jobs
-- whose edges are rows above; this names the workflow and lists its steps (name and
-- job id, in the order added), so queue.workflow(id) and cancel(workflow=id) find them.
CREATE TABLE IF NOT EXISTS {prefix}workflows (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    steps      jsonb       NOT NULL  -- [[name, job id], ...]
);
