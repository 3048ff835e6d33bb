-- venturi schema, version 2: storage parameters for a queue's churn. Forward-only.
--
-- Every job inserts a row, updates it at least twice (claim, settle) and, with
-- retention, deletes it: the jobs table turns over its whole content every retention
-- period, and the journal gains and loses a row per job. PostgreSQL's defaults wait
-- for 20 % of a table to change before vacuuming and 10 % before analyzing, and then
-- vacuum with a small cost budget. These settings make autovacuum visit the queue's
-- tables after a small absolute amount of churn and finish quickly; fresh statistics
-- also replace the plans the workers cached while the table was empty
-- (docs/operations/maintenance.md). The visit interval itself, autovacuum_naptime,
-- is a server setting no table can change.
--
-- No update of a job is a HOT update: each one changes a column that an index holds
-- or that a partial index's predicate reads (status, claim_expires_at, finished_at),
-- so 0001's fill factor of 80 on jobs buys room for a row's new versions on its own
-- page, not HOT chains, and stays as it is. The journal is insert-only (full pages).
-- The heartbeat's update of a worker's row touches no indexed column: HOT, given
-- room on the page, which fillfactor 50 keeps for the tiny workers table.
--
-- A parameter an operator already set on a table (docs/operations/retention.md
-- recommended some) is kept: only the missing ones are added, so running this
-- twice, or after tuning, changes nothing.
DO $storage$
DECLARE
    wanted constant text[][] := ARRAY[
        ['{prefix}jobs', 'autovacuum_vacuum_threshold', '1000'],
        ['{prefix}jobs', 'autovacuum_vacuum_scale_factor', '0.02'],
        ['{prefix}jobs', 'autovacuum_vacuum_insert_threshold', '1000'],
        ['{prefix}jobs', 'autovacuum_vacuum_insert_scale_factor', '0.02'],
        ['{prefix}jobs', 'autovacuum_analyze_threshold', '1000'],
        ['{prefix}jobs', 'autovacuum_analyze_scale_factor', '0.02'],
        ['{prefix}jobs', 'autovacuum_vacuum_cost_delay', '1'],
        ['{prefix}jobs', 'autovacuum_vacuum_cost_limit', '2000'],
        ['{prefix}journal', 'autovacuum_vacuum_threshold', '1000'],
        ['{prefix}journal', 'autovacuum_vacuum_scale_factor', '0.02'],
        ['{prefix}journal', 'autovacuum_vacuum_insert_threshold', '1000'],
        ['{prefix}journal', 'autovacuum_vacuum_insert_scale_factor', '0.02'],
        ['{prefix}journal', 'autovacuum_analyze_threshold', '1000'],
        ['{prefix}journal', 'autovacuum_analyze_scale_factor', '0.02'],
        ['{prefix}journal', 'autovacuum_vacuum_cost_delay', '1'],
        ['{prefix}journal', 'autovacuum_vacuum_cost_limit', '2000'],
        ['{prefix}workers', 'fillfactor', '50']
    ];
    setting text[];
BEGIN
    FOREACH setting SLICE 1 IN ARRAY wanted LOOP
        IF NOT EXISTS (
            SELECT 1 FROM pg_class AS c, pg_options_to_table(c.reloptions) AS o
            WHERE c.oid = setting[1]::regclass AND o.option_name = setting[2]
        ) THEN
            EXECUTE format('ALTER TABLE %s SET (%s = %s)',
                           setting[1]::regclass, setting[2], setting[3]);
        END IF;
    END LOOP;
END
$storage$;
