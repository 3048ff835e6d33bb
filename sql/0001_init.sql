-- venturi schema, version 1. Forward-only: never edit once released; add 0002_*.sql instead.

CREATE TABLE IF NOT EXISTS {prefix}jobs (
    id               uuid        PRIMARY KEY,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    priority         smallint    NOT NULL DEFAULT 1 CONSTRAINT {prefix}jobs_priority CHECK (priority BETWEEN 0 AND 2),
    status           text        NOT NULL DEFAULT 'pending'
                     CONSTRAINT {prefix}jobs_status CHECK (status IN ('pending', 'claimed', 'completed', 'dead')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    visible_at       timestamptz NOT NULL DEFAULT now(),
    claim_expires_at timestamptz,
    claimed_by       text,
    finished_at      timestamptz,
    run_count        integer     NOT NULL DEFAULT 0 CONSTRAINT {prefix}jobs_run_count CHECK (run_count >= 0),
    failure_count    integer     NOT NULL DEFAULT 0 CONSTRAINT {prefix}jobs_failure_count CHECK (failure_count >= 0),
    max_failures     integer     NOT NULL DEFAULT 25 CONSTRAINT {prefix}jobs_max_failures CHECK (max_failures >= 1),
    carry            jsonb,
    dedup_key        text,
    subject          text,
    periodic         boolean     NOT NULL DEFAULT false,
    -- A claimed row always names its owner and lease; nothing else does.
    CONSTRAINT {prefix}jobs_claim_shape CHECK (
        (status = 'claimed') = (claimed_by IS NOT NULL AND claim_expires_at IS NOT NULL)),
    -- Terminal rows, and only they, carry finished_at (cleanup keys on it).
    CONSTRAINT {prefix}jobs_finish_shape CHECK (
        (status IN ('completed', 'dead')) = (finished_at IS NOT NULL))
) WITH (fillfactor = 80);  -- room on the page so status flips stay HOT updates

-- Claiming: the runnable prefix of each tier is a range scan, however many
-- finished or future rows exist.
CREATE INDEX IF NOT EXISTS {prefix}jobs_claim
    ON {prefix}jobs (priority, visible_at, id) WHERE status = 'pending';
-- Stale-lease recovery.
CREATE INDEX IF NOT EXISTS {prefix}jobs_expiry
    ON {prefix}jobs (claim_expires_at) WHERE status = 'claimed';
-- Dedup candidates: the oldest pending job per (kind, key).
CREATE INDEX IF NOT EXISTS {prefix}jobs_dedup
    ON {prefix}jobs (kind, dedup_key, created_at) WHERE status = 'pending' AND dedup_key IS NOT NULL;
-- Cleanup and retention.
CREATE INDEX IF NOT EXISTS {prefix}jobs_finished
    ON {prefix}jobs (finished_at) WHERE finished_at IS NOT NULL;
-- Dead letters, newest first (detail, redrive, stats).
CREATE INDEX IF NOT EXISTS {prefix}jobs_dead
    ON {prefix}jobs (finished_at DESC, id) WHERE status = 'dead';
-- Subject subtree lookups: a byte-ordered range [s || '/', s || '0').
CREATE INDEX IF NOT EXISTS {prefix}jobs_subject
    ON {prefix}jobs (subject COLLATE "C") WHERE subject IS NOT NULL;
-- Rule 12: at most one non-terminal occurrence per periodic kind.
CREATE UNIQUE INDEX IF NOT EXISTS {prefix}jobs_periodic
    ON {prefix}jobs (kind) WHERE periodic AND status IN ('pending', 'claimed');

CREATE TABLE IF NOT EXISTS {prefix}journal (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      uuid        NOT NULL,  -- follows its job: see the triggers below
    kind        text        NOT NULL,
    run_no      integer     NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    outcome     text        NOT NULL CONSTRAINT {prefix}journal_outcome CHECK (outcome IN (
                    'completed', 'paused', 'retried', 'dead', 'stale-recovered',
                    'released', 'merged', 'redriven')),
    note        text,
    attachment  jsonb
);
CREATE INDEX IF NOT EXISTS {prefix}journal_job ON {prefix}journal (job_id, id);

-- The journal follows its job by statement triggers, not a foreign key.
--
-- Every journal entry is written by the statement that updates its job's row, from that
-- UPDATE's RETURNING (rule 5), so an entry always names a job that exists and that its
-- writer holds locked. A foreign key would re-check this for every entry: a lookup and
-- a row lock (a WAL record) per settled run, about a quarter of a settle's time and 30 %
-- of a worker's drain throughput. What it would also do, delete the journal with its
-- job, these triggers do: one statement per DELETE (cancel, cleanup, retention, or an
-- operator's own SQL) removes the entries of every job it removed, and TRUNCATE of the
-- jobs empties the journal. The trigger runs after the DELETE in the same transaction on a fresh
-- snapshot, so it also sees entries committed by a writer the DELETE waited for; a
-- writer that waits for the DELETE instead finds no row and writes no entry.

-- Shared by every prefix in the schema: the journal to follow is the trigger's argument.
-- Two prefixes may migrate at once (each under its own lock): replacing the one function
-- is serialized here, or one of them fails with "tuple concurrently updated".
SELECT pg_advisory_xact_lock(hashtextextended('venturi:shared-functions', 0));
CREATE OR REPLACE FUNCTION venturi_journal_follows_jobs() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    left_over boolean;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        -- Unless the same TRUNCATE named the journal too (then it is empty, and in use).
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I)', TG_TABLE_SCHEMA, TG_ARGV[0])
            INTO left_over;
        IF left_over THEN
            EXECUTE format('TRUNCATE %I.%I', TG_TABLE_SCHEMA, TG_ARGV[0]);
        END IF;
    ELSE
        EXECUTE format('DELETE FROM %I.%I WHERE job_id IN (SELECT id FROM gone)',
                       TG_TABLE_SCHEMA, TG_ARGV[0]);
    END IF;
    RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS {prefix}jobs_journal_delete ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_journal_delete AFTER DELETE ON {prefix}jobs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION venturi_journal_follows_jobs('{prefix}journal');

DROP TRIGGER IF EXISTS {prefix}jobs_journal_truncate ON {prefix}jobs;
CREATE TRIGGER {prefix}jobs_journal_truncate AFTER TRUNCATE ON {prefix}jobs
    FOR EACH STATEMENT EXECUTE FUNCTION venturi_journal_follows_jobs('{prefix}journal');

CREATE TABLE IF NOT EXISTS {prefix}workers (
    name        text        NOT NULL,
    boot_id     text        NOT NULL,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    kinds       text[]      NOT NULL,
    concurrency integer     NOT NULL,
    in_flight   integer     NOT NULL DEFAULT 0,
    draining    boolean     NOT NULL DEFAULT false,
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, boot_id)
);
