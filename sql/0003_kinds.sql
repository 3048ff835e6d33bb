-- venturi schema, version 3: flow control (docs/concepts/flow-control.md). Forward-only.
--
-- {prefix}kinds: what an operator decided about a kind, read by every claim. A kind
-- without a row runs under its code's limits, unpaused. `concurrency` and the rate
-- (`rate_count` claims per `rate_period`) override the task class's values while set;
-- NULL means "the code's value" (Queue.set_limits(kind, concurrency=None) clears it).
-- The code's values (`code_*`) are declared by each worker as it starts, from its task
-- classes, so every process (the CLI too) knows the limits in force without the code.
CREATE TABLE IF NOT EXISTS {prefix}kinds (
    kind             text        PRIMARY KEY,
    paused           boolean     NOT NULL DEFAULT false,
    concurrency      integer     CONSTRAINT {prefix}kinds_concurrency CHECK (concurrency >= 1),
    rate_count       integer     CONSTRAINT {prefix}kinds_rate_count CHECK (rate_count >= 1),
    rate_period      interval    CONSTRAINT {prefix}kinds_rate_period CHECK (rate_period > interval '0'),
    code_concurrency integer,
    code_rate_count  integer,
    code_rate_period interval,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT {prefix}kinds_rate_shape CHECK ((rate_count IS NULL) = (rate_period IS NULL))
);

-- The partition of a job's limits (Task.limit_key()): NULL is the kind's own partition.
-- Nullable without a default, so adding it rewrites no row.
ALTER TABLE {prefix}jobs ADD COLUMN IF NOT EXISTS limit_key text;

-- A limited claim counts its kinds' claimed jobs through the partial index of claimed
-- rows (jobs_expiry, 0001_init.sql), as small as the work in flight: no index of its
-- own, which every claim and settlement of every kind would pay for.

-- The claims of rate-limited kinds inside their window: one row per claim statement
-- and partition (`n` jobs claimed at `claimed_at`), written by the claim that took
-- them and pruned by the next claims of its kind once older than the window (a sliding
-- log, not a counter: "no window of the stated length holds more than N claims" is
-- checked exactly).
CREATE TABLE IF NOT EXISTS {prefix}kind_starts (
    kind       text        NOT NULL,
    limit_key  text,
    claimed_at timestamptz NOT NULL,
    n          integer     NOT NULL CONSTRAINT {prefix}kind_starts_n CHECK (n >= 1)
);
CREATE INDEX IF NOT EXISTS {prefix}kind_starts_window
    ON {prefix}kind_starts (kind, claimed_at);
