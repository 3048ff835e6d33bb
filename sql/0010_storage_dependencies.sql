-- venturi schema, version 10: 0002's storage parameters for the tables that turn over
-- with the jobs. Forward-only.
--
-- A job enqueued after others inserts its edges (dependencies, and dependency_shards
-- for a large fan-in) and a workflow its record; each goes when its job does (the jobs
-- table's delete trigger, 0004 and 0008), so with retention these tables turn over
-- their content as the jobs table does. 0002 gave only jobs and journal the settings
-- that make autovacuum visit a table after a small absolute churn: these waited for 20 %
-- of themselves, as jobs once did (docs/operations/maintenance.md). The small tables
-- that churn (tallies, kind_starts) keep PostgreSQL's defaults: their threshold of 50
-- dead rows plus 20 % of a few rows is already a small churn. Where autovacuum does not
-- run at all, the worker's own vacuum covers them all (venturi/maintenance.py, TABLES).
--
-- As in 0002, a parameter an operator already set is kept.
DO $storage$
DECLARE
    tables constant text[] := ARRAY['{prefix}dependencies', '{prefix}dependency_shards',
                                     '{prefix}workflows'];
    wanted constant text[][] := ARRAY[
        ['autovacuum_vacuum_threshold', '1000'],
        ['autovacuum_vacuum_scale_factor', '0.02'],
        ['autovacuum_vacuum_insert_threshold', '1000'],
        ['autovacuum_vacuum_insert_scale_factor', '0.02'],
        ['autovacuum_analyze_threshold', '1000'],
        ['autovacuum_analyze_scale_factor', '0.02'],
        ['autovacuum_vacuum_cost_delay', '1'],
        ['autovacuum_vacuum_cost_limit', '2000']
    ];
    tbl text;
    setting text[];
BEGIN
    FOREACH tbl IN ARRAY tables LOOP
        FOREACH setting SLICE 1 IN ARRAY wanted LOOP
            IF NOT EXISTS (
                SELECT 1 FROM pg_class AS c, pg_options_to_table(c.reloptions) AS o
                WHERE c.oid = tbl::regclass AND o.option_name = setting[1]
            ) THEN
                EXECUTE format('ALTER TABLE %s SET (%s = %s)',
                               tbl::regclass, setting[1], setting[2]);
            END IF;
        END LOOP;
    END LOOP;
END
$storage$;
