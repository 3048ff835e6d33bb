-- Settling runs (venturi/store/_sql.py says how these files are read): the
-- transitions of venturi.store.lifecycle.settle, mirrored here because the
-- budget depends on the row's counts and the whole batch is one statement.

-- name: settle_many
-- A batch of settlements, each guarded (still_held); the journal entries come from
-- the UPDATE's RETURNING, so a guard miss journals nothing; a terminal periodic
-- occurrence inserts its successor and announces it with the rows made pending
-- again (wake_pending; docs/concepts/periodic.md). Each row reads its
-- input from $4 under its id: [run_no, action, note, attachment, delay in
-- microseconds, set_carry, carry, successor id, successor time, successor trace
-- context, result]. A completion stores its result; a row that finishes (completed,
-- dead) is announced to result() waiters (notify_finished) when one waits for it (its
-- flag awaited, sql/0009_awaited.sql: nobody else reads the channel). The CASEs are
-- lifecycle.settle: complete -> completed; kill -> dead; fail -> dead when
-- failure_count + 1 reaches max_failures (budget_spent), else pending (retried);
-- pause, release -> pending. fail and kill count a failure; fail, pause and
-- release make the job visible after its delay; terminal rows are finished now.
WITH upd AS (
    UPDATE {prefix}jobs AS j SET
        status = CASE $4::jsonb -> (j.id::text) ->> 1
            WHEN 'complete' THEN 'completed'
            WHEN 'kill' THEN 'dead'
            WHEN 'fail' THEN CASE WHEN j.failure_count + 1 >= j.max_failures
                                  THEN 'dead' ELSE 'pending' END
            ELSE 'pending' END,
        failure_count = j.failure_count + CASE WHEN $4::jsonb -> (j.id::text) ->> 1
                                                    IN ('fail', 'kill') THEN 1 ELSE 0 END,
        visible_at = CASE WHEN $4::jsonb -> (j.id::text) ->> 1 IN ('fail', 'pause', 'release')
                          THEN {now} + ($4::jsonb -> (j.id::text) ->> 4)::int8
                                       * interval '1 microsecond'
                          ELSE j.visible_at END,
        finished_at = CASE $4::jsonb -> (j.id::text) ->> 1
            WHEN 'complete' THEN {now}
            WHEN 'kill' THEN {now}
            WHEN 'fail' THEN CASE WHEN j.failure_count + 1 >= j.max_failures THEN {now} END
            END,
        claimed_by = NULL,
        claim_expires_at = NULL,
        carry = CASE WHEN ($4::jsonb -> (j.id::text) ->> 5)::bool
                     THEN ($4::jsonb -> (j.id::text) ->> 6)::jsonb ELSE j.carry END,
        result = CASE WHEN $4::jsonb -> (j.id::text) ->> 1 = 'complete'
                      THEN ($4::jsonb -> (j.id::text) ->> 10)::jsonb ELSE j.result END
    WHERE
-- include: still_held
    RETURNING j.id, j.kind, j.status, j.payload, j.priority, j.max_failures, j.periodic,
              j.visible_at, j.run_count AS run_no, j.awaited, $4::jsonb -> (j.id::text) AS e
), entries AS (
    INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note, attachment)
    SELECT id, kind, run_no, {now},
           CASE e ->> 1
               WHEN 'complete' THEN 'completed'
               WHEN 'pause' THEN 'paused'
               WHEN 'release' THEN 'released'
               WHEN 'kill' THEN 'dead'
               ELSE CASE WHEN status = 'dead' THEN 'dead' ELSE 'retried' END
           END,
           e ->> 2, (e ->> 3)::jsonb
    FROM upd
    RETURNING job_id, outcome, run_no
), successor AS (
    INSERT INTO {prefix}jobs (id, kind, payload, priority, created_at, visible_at,
                              max_failures, periodic, trace_context)
    SELECT (e ->> 7)::uuid, kind, payload, priority, {now},
           greatest((e ->> 8)::timestamptz, {now}), max_failures, true, (e ->> 9)::jsonb
    FROM upd
    WHERE periodic AND status IN ('completed', 'dead') AND e ->> 7 IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING kind, visible_at
), pending AS (
    -- Work that is runnable again (released, retried, paused) may suit another worker;
    -- work due later says when. A successor is announced like an enqueue: any worker
    -- of its kind arms its timer for the tick (claims at once when it is already due).
    SELECT kind, visible_at FROM upd WHERE status = 'pending'
    UNION ALL
    SELECT kind, visible_at FROM successor
), finished AS (
    SELECT id FROM upd WHERE status IN ('completed', 'dead') AND awaited
),
-- include: notify_finished
,
-- include: wake_pending
-- The row's new status follows from its entry's outcome: reading it there, instead of
-- joining the entries back to upd (a nested loop, quadratic in the batch), keeps a
-- batch of 1,000 linear.
SELECT e.job_id AS id,
       CASE e.outcome WHEN 'completed' THEN 'completed' WHEN 'dead' THEN 'dead'
                      ELSE 'pending' END AS status,
       e.outcome, (SELECT n FROM wake) AS woke,
       (SELECT count(*) FROM successor) AS successors, e.run_no,
       (SELECT n FROM finished_sent) AS announced
FROM entries AS e

-- name: settle_completions
-- settle_many's common case, a batch of plain completions (no carry, no periodic
-- successor): the same guard, journal entry (lifecycle's complete), stored result and
-- announcement to result() waiters of the awaited rows, without the successor insert
-- and the wake-ups a completion never needs. $4 holds [run_no, note, attachment,
-- result] under each id.
WITH upd AS (
    UPDATE {prefix}jobs AS j SET
        status = 'completed', finished_at = {now}, claimed_by = NULL, claim_expires_at = NULL,
        result = ($4::jsonb -> (j.id::text) ->> 3)::jsonb
    WHERE
-- include: still_held
    RETURNING j.id, j.kind, j.run_count, j.awaited, $4::jsonb -> (j.id::text) AS e
), entries AS (
    INSERT INTO {prefix}journal (job_id, kind, run_no, recorded_at, outcome, note, attachment)
    SELECT id, kind, run_count, {now}, 'completed', e ->> 1, (e ->> 2)::jsonb FROM upd
    RETURNING job_id, run_no
), finished AS (
    SELECT id FROM upd WHERE awaited
),
-- include: notify_finished
SELECT job_id, run_no, (SELECT n FROM finished_sent) AS announced FROM entries

-- fragment: notify_finished
-- A CTE "finished_sent" (n) telling result() waiters that the jobs of a CTE "finished"
-- (id) have finished: their ids on the results channel, comma-separated, at most 100
-- per message (venturi/notices.py, FINISHED_CHUNK: well under NOTIFY's 8000 bytes).
-- Sent at commit, so a waiter woken by it reads the finished row; none at all (and so
-- no NOTIFY's commit lock) when "finished" is empty. The statement's final SELECT must
-- read n, or the CTE would not run; no comma after it.
finished_sent AS (
    SELECT count(pg_notify('{prefix}results', c.ids)) AS n
    FROM (SELECT string_agg(f.id::text, ',') AS ids
          FROM (SELECT id, (row_number() OVER () - 1) / 100 AS chunk FROM finished) AS f
          GROUP BY f.chunk) AS c
)
