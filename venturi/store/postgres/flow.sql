-- Flow control: a kind's pause and limits, and the claim of limited kinds
-- (docs/concepts/flow-control.md; venturi/store/_sql.py says how these files are read).

-- name: control_kind
-- An operator's change to one kind ($3 paused or NULL: unchanged; $4/$6 whether the
-- concurrency / rate is set, to $5 / $7,$8, NULL clearing it), and the control
-- message that makes every worker re-read it (venturi/notices.py, "kinds").
WITH up AS (
    INSERT INTO {prefix}kinds AS s (kind, paused, concurrency, rate_count, rate_period, updated_at)
    VALUES ($2, coalesce($3::bool, false), CASE WHEN $4::bool THEN $5::int END,
            CASE WHEN $6::bool THEN $7::int END, CASE WHEN $6::bool THEN $8::interval END, {now})
    ON CONFLICT (kind) DO UPDATE SET
        paused = coalesce($3::bool, s.paused),
        concurrency = CASE WHEN $4::bool THEN $5::int ELSE s.concurrency END,
        rate_count = CASE WHEN $6::bool THEN $7::int ELSE s.rate_count END,
        rate_period = CASE WHEN $6::bool THEN $8::interval ELSE s.rate_period END,
        updated_at = {now}
    RETURNING kind
)
SELECT pg_notify('{prefix}control', $9::text) FROM up

-- name: declare_kinds
-- A starting worker's task classes' limits: the code's values in force from now on
-- (the last worker to start wins during a deploy that changes them). Changed rows
-- only, each announced on the control channel.
WITH c AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::interval[])
        AS c(kind, concurrency, rate_count, rate_period)
), up AS (
    INSERT INTO {prefix}kinds AS s (kind, code_concurrency, code_rate_count, code_rate_period)
    SELECT kind, concurrency, rate_count, rate_period FROM c
    ON CONFLICT (kind) DO UPDATE SET
        code_concurrency = excluded.code_concurrency,
        code_rate_count = excluded.code_rate_count,
        code_rate_period = excluded.code_rate_period
    WHERE (s.code_concurrency, s.code_rate_count, s.code_rate_period)
          IS DISTINCT FROM (excluded.code_concurrency, excluded.code_rate_count,
                            excluded.code_rate_period)
    RETURNING kind
)
SELECT pg_notify('{prefix}control', $5::text) FROM (SELECT 1 FROM up LIMIT 1) AS changed

-- name: kind_controls
-- Every kind's row, or those of $1 (NULL: all): what a worker routes its claims by.
SELECT kind, paused, concurrency, rate_count, rate_period, code_concurrency,
       code_rate_count, code_rate_period
FROM {prefix}kinds WHERE $1::text[] IS NULL OR kind = ANY($1::text[])
ORDER BY kind

-- name: kind_states
-- Each kind with a row (every worker declares its kinds as it starts) or with pending
-- or claimed jobs (a kind no worker serves yet shows with its backlog): its row, its
-- pending and claimed counts (one pass over each status's partial index, not one per
-- kind), and its claims inside the rate window.
WITH pending AS (
    SELECT kind, count(*) AS n FROM {prefix}jobs WHERE status = 'pending' GROUP BY kind
), claimed AS (
    SELECT kind, count(*) AS n FROM {prefix}jobs WHERE status = 'claimed' GROUP BY kind
), named AS (
    SELECT kind FROM {prefix}kinds UNION SELECT kind FROM pending
    UNION SELECT kind FROM claimed
)
SELECT n.kind, coalesce(s.paused, false), s.concurrency, s.rate_count, s.rate_period,
       s.code_concurrency, s.code_rate_count, s.code_rate_period,
       coalesce(p.n, 0), coalesce(c.n, 0),
       (SELECT coalesce(sum(w.n), 0) FROM {prefix}kind_starts AS w WHERE w.kind = n.kind
          AND w.claimed_at > {now} - CASE WHEN s.rate_count IS NOT NULL THEN s.rate_period
                                          ELSE s.code_rate_period END)
FROM named AS n LEFT JOIN {prefix}kinds AS s ON s.kind = n.kind
LEFT JOIN pending AS p ON p.kind = n.kind LEFT JOIN claimed AS c ON c.kind = n.kind
ORDER BY n.kind

-- name: lock_kinds
-- Claimers of one limited kind take turns (docs/concepts/flow-control.md): a lock per
-- kind, held until the claim commits, taken in one order so two claimers of
-- overlapping kinds never deadlock. The claim that follows is a statement of its own,
-- so its snapshot sees every claim committed before the lock was granted. The kinds'
-- rows are then rewritten unchanged, in the same order, once the locks are held: that
-- waits for a claim_limited_fast still running, and tells every later one that its
-- snapshot is too old.
WITH locked AS (
    SELECT count(pg_advisory_xact_lock(hashtextextended('venturi:kind:' || $1::text || ':' || k, 0)))
        AS n
    FROM (SELECT k FROM unnest($2::text[]) AS k ORDER BY k) AS sorted
), rows_ AS (
    SELECT s.kind FROM {prefix}kinds AS s
    WHERE s.kind = ANY($2::text[]) AND (SELECT n FROM locked) >= 0
    ORDER BY s.kind FOR UPDATE OF s
)
UPDATE {prefix}kinds AS s SET kind = s.kind FROM rows_ WHERE s.kind = rows_.kind

-- name: claim_limited
-- The claim of limited kinds, under lock_kinds. Per (kind, limit_key) partition, the
-- room is what its concurrency (claimed jobs) and its rate (claims in the window,
-- kind_starts) leave; partitions with none are skipped by the tier scans, which are
-- the plain claim's (claim_tiers: priorities and reserved slots included), and each
-- partition keeps at most its room of what they found, in claim order. A paused kind
-- is left out. The limits are judged at the clock's time after the lock (t); the tier
-- scans take what was runnable when the transaction began, which only leaves a job
-- that became runnable during the lock wait to the next claim.
WITH t AS (
    SELECT {clock} AS now
), k AS (
    SELECT c.kind, c.lease,
           coalesce(s.concurrency, s.code_concurrency) AS conc,
           CASE WHEN s.rate_count IS NOT NULL THEN s.rate_count ELSE s.code_rate_count END AS rate_n,
           CASE WHEN s.rate_count IS NOT NULL THEN s.rate_period ELSE s.code_rate_period END AS per
    FROM unnest($2::text[], $3::interval[]) AS c(kind, lease)
    LEFT JOIN {prefix}kinds AS s ON s.kind = c.kind
    WHERE NOT coalesce(s.paused, false)
), open_kinds AS (
    SELECT coalesce(array_agg(kind), '{}') AS a FROM k
), pruned AS (
    DELETE FROM {prefix}kind_starts AS w USING k
    -- One range of the window index: only the rows that aged out (all of them for a
    -- kind without a rate).
    WHERE w.kind = k.kind AND w.claimed_at <= CASE WHEN k.rate_n IS NULL THEN 'infinity'
                                                   ELSE (SELECT now FROM t) - k.per END
), used AS (
    SELECT kind, limit_key, sum(claimed) AS claimed, sum(started) AS started FROM (
        SELECT j.kind, j.limit_key, count(*) AS claimed, 0 AS started
        FROM {prefix}jobs AS j JOIN k ON k.kind = j.kind AND k.conc IS NOT NULL
        WHERE j.status = 'claimed'
        GROUP BY j.kind, j.limit_key
        UNION ALL
        SELECT w.kind, w.limit_key, 0, sum(w.n)
        FROM {prefix}kind_starts AS w JOIN k ON k.kind = w.kind AND k.rate_n IS NOT NULL
        WHERE w.claimed_at > (SELECT now FROM t) - k.per
        GROUP BY w.kind, w.limit_key
    ) AS u GROUP BY kind, limit_key
), room AS (
    SELECT u.kind, u.limit_key,
           least(k.conc - u.claimed, k.rate_n - u.started) AS room
    FROM used AS u JOIN k ON k.kind = u.kind
), full_ AS (
    SELECT kind, limit_key FROM room WHERE room <= 0
),
-- include: claim_tiers (tier_filter: not_full)
, ranked AS (
    SELECT j.id, j.kind, j.limit_key, k.rate_n,
           row_number() OVER (PARTITION BY j.kind, j.limit_key
                              ORDER BY j.priority, j.visible_at, j.id) AS rn,
           coalesce(r.room, least(k.conc, k.rate_n)) AS room, least(k.conc, k.rate_n) AS lim
    FROM picked AS f JOIN {prefix}jobs AS j ON j.id = f.id JOIN k ON k.kind = j.kind
    LEFT JOIN room AS r ON r.kind = j.kind AND r.limit_key IS NOT DISTINCT FROM j.limit_key
), kept AS (
    SELECT id, kind, limit_key, rate_n FROM ranked WHERE room IS NULL OR rn <= room
), logged AS (
    INSERT INTO {prefix}kind_starts (kind, limit_key, claimed_at, n)
    SELECT kind, limit_key, (SELECT now FROM t), count(*) FROM kept WHERE rate_n IS NOT NULL
    GROUP BY kind, limit_key
)
UPDATE {prefix}jobs AS j SET
    status = 'claimed',
    claimed_by = $7,
    run_count = j.run_count + 1,
    claim_expires_at = (SELECT now FROM t) + k.lease
FROM kept, k
WHERE j.id = kept.id AND k.kind = j.kind
RETURNING
-- include: job_columns
, (SELECT count(*) FROM picked),
-- The kinds this claim left with a partition more than half used (or full): their
-- settlements are worth announcing to the other workers (docs/concepts/flow-control.md).
(SELECT coalesce(array_agg(DISTINCT kind), '{}') FROM ranked
 WHERE room IS NOT NULL AND 2 * (room - rn) < lim)

-- name: claim_limited_fast
-- The claim of limited kinds while none of them is near its limits, in one statement
-- of its own (docs/concepts/flow-control.md, the fast path). Its turn is the kinds'
-- rows: it takes them only if none is locked (SKIP LOCKED: it never waits) and each
-- is still the version its snapshot reads, then rewrites them unchanged. Every limited
-- claim rewrites them (lock_kinds too), so an unchanged row means no claim committed
-- since the snapshot and none is running: its counts are exact. Each kind's room is
-- counted over all its partitions at once (its claimed jobs, its claims in the rate
-- window): no less than any one partition's. When it has its turn and every kind has
-- room for the whole batch ($4), no partition can be overrun and the batch is the
-- plain claim's (claim_tiers), logged in kind_starts; otherwise it claims nothing and
-- lock_kinds and claim_limited decide.
--
-- Planned once per connection, as the plain claim is (claim.sql): planning this
-- statement cost more than running it (0.85 ms against 0.6 ms for a claim of 20), and
-- every claim of a kind with limits that do not bind comes this way. Each of its scans
-- is an index range (the claim index, jobs_claimed_kind, kind_starts_window, the kinds'
-- primary key) and its joins back to the jobs table nested loops over the primary key
-- under any plan its sessions can make (tests/store/test_plan_cache.py).
-- plan: cached
WITH t AS (
    SELECT {clock} AS now
), k AS (
    SELECT c.kind, c.lease,
           coalesce(s.concurrency, s.code_concurrency) AS conc,
           CASE WHEN s.rate_count IS NOT NULL THEN s.rate_count ELSE s.code_rate_count END AS rate_n,
           CASE WHEN s.rate_count IS NOT NULL THEN s.rate_period ELSE s.code_rate_period END AS per
    FROM unnest($2::text[], $3::interval[]) AS c(kind, lease)
    LEFT JOIN {prefix}kinds AS s ON s.kind = c.kind
    WHERE NOT coalesce(s.paused, false)
), seen AS (
    SELECT s.kind, s.xmin AS version FROM {prefix}kinds AS s WHERE s.kind = ANY($2::text[])
), turn AS (
    SELECT s.kind FROM {prefix}kinds AS s JOIN seen ON seen.kind = s.kind
    WHERE s.kind = ANY($2::text[]) AND s.xmin = seen.version
    FOR UPDATE OF s SKIP LOCKED
), stamped AS (
    UPDATE {prefix}kinds AS s SET kind = s.kind FROM turn WHERE s.kind = turn.kind
    RETURNING s.kind
), pruned AS (
    DELETE FROM {prefix}kind_starts AS w USING k
    -- One range of the window index: only the rows that aged out (all of them for a
    -- kind without a rate).
    WHERE w.kind = k.kind AND w.claimed_at <= CASE WHEN k.rate_n IS NULL THEN 'infinity'
                                                   ELSE (SELECT now FROM t) - k.per END
), room AS (
    SELECT k.kind, least(k.conc, k.rate_n) AS lim, least(
        k.conc - CASE WHEN k.conc IS NOT NULL THEN
            (SELECT count(*) FROM {prefix}jobs AS j
             WHERE j.status = 'claimed' AND j.kind = k.kind) END,
        k.rate_n - CASE WHEN k.rate_n IS NOT NULL THEN
            (SELECT coalesce(sum(w.n), 0) FROM {prefix}kind_starts AS w
             WHERE w.kind = k.kind AND w.claimed_at > (SELECT now FROM t) - k.per) END) AS room
    FROM k
), open_kinds AS (
    SELECT CASE WHEN (SELECT count(*) FROM stamped) = cardinality($2::text[])
                     AND bool_and(room IS NULL OR room >= $4)
                THEN coalesce(array_agg(kind), '{}') ELSE '{}' END AS a
    FROM room
),
-- include: claim_tiers
, claimed AS (
    UPDATE {prefix}jobs AS j SET
        status = 'claimed',
        claimed_by = $7,
        run_count = j.run_count + 1,
        claim_expires_at = (SELECT now FROM t) + k.lease
    FROM picked, k
    WHERE j.id = picked.id AND k.kind = j.kind
    RETURNING
-- include: job_columns
), logged AS (
    INSERT INTO {prefix}kind_starts (kind, limit_key, claimed_at, n)
    SELECT c.kind, c.limit_key, (SELECT now FROM t), count(*)
    FROM claimed AS c JOIN k ON k.kind = c.kind AND k.rate_n IS NOT NULL
    GROUP BY c.kind, c.limit_key
)
SELECT c.*,
-- The kinds this claim left more than half used, as claim_limited reports them.
(SELECT coalesce(array_agg(r.kind), '{}') FROM room AS r
 WHERE 2 * (r.room - (SELECT count(*) FROM claimed AS x WHERE x.kind = r.kind)) < r.lim)
FROM claimed AS c

-- name: limited_held
-- After a limited claim, in its transaction: each kind a partition of which has no room
-- left, why (concurrency or rate), and for a full rate window when its oldest claim
-- leaves it (the earliest time that partition gets budget back).
WITH k AS (
    SELECT s.kind, coalesce(s.concurrency, s.code_concurrency) AS conc,
           CASE WHEN s.rate_count IS NOT NULL THEN s.rate_count ELSE s.code_rate_count END AS rate_n,
           CASE WHEN s.rate_count IS NOT NULL THEN s.rate_period ELSE s.code_rate_period END AS per
    FROM {prefix}kinds AS s WHERE s.kind = ANY($2::text[]) AND NOT s.paused
), parts AS (
    SELECT j.kind, 'concurrency' AS why, NULL::timestamptz AS until
    FROM {prefix}jobs AS j JOIN k ON k.kind = j.kind AND k.conc IS NOT NULL
    WHERE j.status = 'claimed'
    GROUP BY j.kind, j.limit_key, k.conc HAVING count(*) >= k.conc
    UNION ALL
    SELECT w.kind, 'rate', min(w.claimed_at) + k.per
    FROM {prefix}kind_starts AS w JOIN k ON k.kind = w.kind AND k.rate_n IS NOT NULL
    WHERE w.claimed_at > {clock} - k.per
    GROUP BY w.kind, w.limit_key, k.per, k.rate_n HAVING sum(w.n) >= k.rate_n
)
SELECT kind, why, min(until) FROM parts GROUP BY kind, why ORDER BY kind, why

-- fragment: not_full
-- A tier scan of claim_limited skips the jobs of partitions without room.
      AND NOT EXISTS (SELECT 1 FROM full_ AS f
                      WHERE f.kind = j.kind AND f.limit_key IS NOT DISTINCT FROM j.limit_key)

-- fragment: controlled
-- A kind the plain claim leaves alone (a row of {prefix}kinds aliased s): paused, or
-- limited, so claim_limited's.
(s.paused OR s.concurrency IS NOT NULL OR s.rate_count IS NOT NULL
 OR s.code_concurrency IS NOT NULL OR s.code_rate_count IS NOT NULL)
