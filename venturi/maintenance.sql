-- The queue's own vacuum (venturi/maintenance.py). The prefix is the advisory lock's key
-- and reaches these statements only as a bind parameter; the tables come as regclass.

-- name: maintenance_lock
-- One vacuuming worker per queue: a session lock, since VACUUM runs outside any
-- transaction (a transaction-scoped lock could not cover it).
SELECT pg_try_advisory_lock(hashtextextended('venturi:maintenance:' || $1::text, 0))

-- name: maintenance_unlock
SELECT pg_advisory_unlock(hashtextextended('venturi:maintenance:' || $1::text, 0))

-- name: table_health
-- Dead row versions and the last vacuum of each table, and whether autovacuum is
-- meant to visit it (server setting and the table's own autovacuum_enabled).
SELECT c.oid::regclass::text AS name, s.n_dead_tup AS dead, s.n_live_tup AS live,
       s.n_mod_since_analyze AS modified,
       extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum)) AS since_vacuum,
       extract(epoch FROM now() - greatest(s.last_analyze, s.last_autoanalyze)) AS since_analyze,
       current_setting('autovacuum')::bool AND current_setting('track_counts')::bool
           AND coalesce((SELECT option_value::bool FROM pg_options_to_table(c.reloptions)
                         WHERE option_name = 'autovacuum_enabled'), true) AS autovacuum,
       pg_has_role(c.relowner, 'USAGE') AS may_vacuum
FROM unnest($1::regclass[]) WITH ORDINALITY AS t(oid, n)
JOIN pg_class AS c ON c.oid = t.oid
JOIN pg_stat_all_tables AS s ON s.relid = c.oid
ORDER BY t.n

-- name: oldest_snapshot
-- Who holds back the xmin horizon (what VACUUM may remove): the oldest snapshot of a
-- session of this database, a prepared transaction, or a replication slot.
SELECT what, xmin::text AS xmin, age(xmin) AS xid_age, seconds FROM (
    -- A session's snapshot (backend_xmin) or, idle in a transaction that wrote, its own
    -- transaction id (backend_xid): either keeps newer row versions.
    SELECT format('pid %s (%s, %s, application %L)', pid, backend_type,
                  coalesce(state, '-'), application_name) AS what,
           CASE WHEN backend_xid IS NULL OR age(backend_xmin) > age(backend_xid)
                THEN coalesce(backend_xmin, backend_xid) ELSE backend_xid END AS xmin,
           extract(epoch FROM now() - xact_start) AS seconds
    FROM pg_stat_activity
    WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND pid <> pg_backend_pid()
      AND (datname = current_database() OR datname IS NULL)
    UNION ALL
    SELECT format('prepared transaction %L', gid), transaction,
           extract(epoch FROM now() - prepared)
    FROM pg_prepared_xacts WHERE database = current_database()
    UNION ALL
    SELECT format('replication slot %L', slot_name), xmin, NULL
    FROM pg_replication_slots WHERE xmin IS NOT NULL
) AS h
ORDER BY age(xmin) DESC
LIMIT 1
