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
    job_id      uuid        NOT NULL REFERENCES {prefix}jobs (id) ON DELETE CASCADE,
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
