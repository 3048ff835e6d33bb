-- Migrations' bookkeeping (venturi/store/_sql.py says how these files are read).

-- name: migrations_table
-- Bookkeeping of applied migrations, created before the first one runs.
CREATE TABLE IF NOT EXISTS {prefix}migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: migrate_lock
-- Concurrent migrators queue here instead of racing DDL. Transaction-scoped, so
-- it is taken and released on one server connection even behind a pooler.
SELECT pg_advisory_xact_lock(hashtextextended('venturi:migrate:' || $1::text, 0))

-- name: applied_migrations
SELECT version FROM {prefix}migrations ORDER BY version

-- name: record_migration
INSERT INTO {prefix}migrations (version, name) VALUES ($1, $2)

-- name: db_now
SELECT now()
