-- venturi schema, version 6: the finished jobs' tally. Forward-only.
--
-- Queue.stats() and Queue.count() report how many jobs are completed or dead, per
-- kind. Counting those rows reads every finished job the queue keeps (retention keeps
-- days of them: 1,000,000 rows took 0.2-0.3 s, docs/explain-plans.md), and an
-- index-only count needs a visibility map that a table autovacuum never visits does
-- not get. So the counts are kept here, by statement triggers on the jobs table, in
-- the transaction that changes the rows they count: a reader sees exactly the count of
-- the finished rows its own snapshot sees, whoever changed them (a worker, retention,
-- venturi cleanup, or an operator's own SQL). docs/design-notes.md says why this and
-- not an estimate.
--
-- Per kind and finished status: how many jobs are in it (n), and how many times a job
-- entered it by an UPDATE (entered: a settle or a recovery; it never goes down when
-- finished jobs are deleted, so it measures throughput). Rows are per backend (slot =
-- its pid): concurrent writers never wait for each other or deadlock on a counter, and
-- a reader sums the slots. A backend that creates a row of its own also folds into its
-- rows those of backends that have gone (no longer in pg_stat_activity), skipping rows
-- another transaction holds, so the table stays about as large as the set of backends
-- writing to it.

CREATE TABLE IF NOT EXISTS {prefix}tallies (
    kind    text    NOT NULL,
    status  text    NOT NULL CONSTRAINT {prefix}tallies_status CHECK (status IN ('completed', 'dead')),
    slot    integer NOT NULL,
    n       bigint  NOT NULL,
    entered bigint  NOT NULL,
    PRIMARY KEY (kind, status, slot)
) WITH (fillfactor = 50);  -- room on the page: each finishing statement updates a row in place

-- One function for the four triggers below (plpgsql plans each trigger's statements
-- separately, so each reads its own transition tables). The EXISTS tests come first:
-- most statements that reach it (a claim) finish no job, and then nothing else runs.
CREATE OR REPLACE FUNCTION {prefix}tally_jobs() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    kinds text[];
    statuses text[];
    ns bigint[];
    entries bigint[];
    added integer;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM {prefix}tallies;
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' THEN
        -- Row by row, and only for a row inserted finished (its trigger's WHEN): an
        -- enqueue inserts pending rows, so it never calls this function at all.
        kinds := ARRAY[NEW.kind];
        statuses := ARRAY[NEW.status];
        ns := ARRAY[1::bigint];
        entries := ARRAY[0::bigint];
    ELSIF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM old_rows WHERE status IN ('completed', 'dead')) THEN
            RETURN NULL;
        END IF;
        SELECT array_agg(kind), array_agg(status), array_agg(-n), array_agg(0::bigint)
        INTO kinds, statuses, ns, entries
        FROM (SELECT kind, status, count(*) AS n FROM old_rows
              WHERE status IN ('completed', 'dead') GROUP BY kind, status) AS c;
    ELSE
        IF NOT EXISTS (SELECT 1 FROM new_rows WHERE status IN ('completed', 'dead'))
           AND NOT EXISTS (SELECT 1 FROM old_rows WHERE status IN ('completed', 'dead')) THEN
            RETURN NULL;
        END IF;
        -- A row counts where it is now and stops counting where it was; it entered its
        -- status if its old version had another one.
        SELECT array_agg(kind), array_agg(status), array_agg(n), array_agg(e)
        INTO kinds, statuses, ns, entries
        FROM (SELECT kind, status, sum(d) AS n, sum(e) AS e FROM (
                  SELECT nr.kind, nr.status, 1 AS d,
                         (orow.status IS DISTINCT FROM nr.status)::int AS e
                  FROM new_rows AS nr LEFT JOIN old_rows AS orow ON orow.id = nr.id
                  WHERE nr.status IN ('completed', 'dead')
                  UNION ALL
                  SELECT kind, status, -1, 0 FROM old_rows WHERE status IN ('completed', 'dead')
              ) AS moves GROUP BY kind, status HAVING sum(d) <> 0 OR sum(e) <> 0) AS c;
        IF kinds IS NULL THEN
            RETURN NULL;  -- finished rows changed, but not their status or kind
        END IF;
    END IF;

    -- Only this backend writes the rows of its slot: no other writer waits on them.
    WITH delta AS (
        SELECT * FROM unnest(kinds, statuses, ns, entries) AS d(kind, status, n, entered)
    ), bumped AS (
        UPDATE {prefix}tallies AS t SET n = t.n + delta.n, entered = t.entered + delta.entered
        FROM delta
        WHERE t.slot = pg_backend_pid() AND t.kind = delta.kind AND t.status = delta.status
        RETURNING t.kind, t.status
    )
    INSERT INTO {prefix}tallies (kind, status, slot, n, entered)
    SELECT kind, status, pg_backend_pid(), n, entered FROM delta
    WHERE (kind, status) NOT IN (SELECT kind, status FROM bumped);
    GET DIAGNOSTICS added = ROW_COUNT;

    IF added > 0 THEN
        -- A new row: this backend is new, or this kind is. Take over the rows of
        -- backends that have gone. SKIP LOCKED: never wait, not even for a prepared
        -- transaction; a row skipped now is folded by the next new row.
        WITH gone AS (
            DELETE FROM {prefix}tallies AS t
            WHERE (t.kind, t.status, t.slot) IN (
                SELECT kind, status, slot FROM {prefix}tallies
                WHERE slot <> pg_backend_pid()
                  AND slot NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
                FOR UPDATE SKIP LOCKED)
            RETURNING t.kind, t.status, t.n, t.entered
        )
        INSERT INTO {prefix}tallies AS t (kind, status, slot, n, entered)
        SELECT kind, status, pg_backend_pid(), sum(n), sum(entered) FROM gone
        GROUP BY kind, status
        ON CONFLICT (kind, status, slot)
            DO UPDATE SET n = t.n + excluded.n, entered = t.entered + excluded.entered;
    END IF;
    RETURN NULL;
END
$fn$;

-- The count starts from the rows already there. CREATE TRIGGER locks the jobs table
-- against writes until this migration commits, so no change can fall between the
-- count and the first trigger (slot 0 is no backend's: the first new row folds it).
DROP TRIGGER IF EXISTS {prefix}jobs_tally_insert ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_tally_insert AFTER INSERT ON {prefix}jobs
    FOR EACH ROW WHEN (NEW.status IN ('completed', 'dead'))
    EXECUTE FUNCTION {prefix}tally_jobs();
DROP TRIGGER IF EXISTS {prefix}jobs_tally_update ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_tally_update AFTER UPDATE ON {prefix}jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {prefix}tally_jobs();
DROP TRIGGER IF EXISTS {prefix}jobs_tally_delete ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_tally_delete AFTER DELETE ON {prefix}jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {prefix}tally_jobs();
DROP TRIGGER IF EXISTS {prefix}jobs_tally_truncate ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_tally_truncate AFTER TRUNCATE ON {prefix}jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {prefix}tally_jobs();

DELETE FROM {prefix}tallies;
INSERT INTO {prefix}tallies (kind, status, slot, n, entered)
SELECT kind, status, 0, count(*), 0 FROM {prefix}jobs
WHERE status IN ('completed', 'dead') GROUP BY kind, status;
