-- The workers table, control messages, and a worker's identity lock
-- (venturi/store/_sql.py says how these files are read).

-- name: heartbeat
INSERT INTO {prefix}workers (name, boot_id, host, pid, kinds, concurrency, in_flight,
                             draining, started_at, last_seen)
VALUES ($2, $3, $4, $5, $6, $7, $8, $9, $10, {now})
ON CONFLICT (name, boot_id) DO UPDATE SET
    in_flight = EXCLUDED.in_flight, draining = EXCLUDED.draining, last_seen = EXCLUDED.last_seen

-- name: forget_worker
DELETE FROM {prefix}workers WHERE name = $1 AND boot_id = $2

-- name: workers
SELECT name, boot_id, host, pid, kinds, concurrency, in_flight, started_at, last_seen, draining
FROM {prefix}workers ORDER BY name, started_at

-- name: notify_control
-- A drain (or any control message venturi/notices.py builds) to every listening worker.
SELECT pg_notify('{prefix}control', $1::text)

-- name: identity_lock
-- One live worker per (queue, name), held by a dedicated session for life
-- (docs/concepts/leases.md, restarts).
SELECT pg_try_advisory_lock(hashtextextended('venturi:worker:' || $1::text || ':' || $2::text, 0))

-- name: identity_reclaim
-- After a partition: end our own earlier session ($1, its backend pid) if it still holds
-- the name's lock. Its client end died without the server hearing of it, and the
-- server would keep it (and the lock) until its TCP noticed. Only that pid, holding
-- this very lock.
SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks AS l
WHERE l.locktype = 'advisory' AND l.granted AND l.pid = $1
  AND ((l.classid::bigint << 32) | l.objid::bigint)
      = hashtextextended('venturi:worker:' || $2::text || ':' || $3::text, 0)

-- name: listen_results
-- SyncQueue.result's LISTEN (LISTEN takes no bind parameter: the channel is the
-- validated prefix's, spliced like a table name).
LISTEN {prefix}results
