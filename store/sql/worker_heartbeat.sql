-- The worker heartbeat (WorkerHeartbeat): it marks the worker alive and
-- renews the due leases of the tasks it holds, read once (held): every
-- one, through the lease index (WorkerHeartbeatAll); only those listed,
-- by primary key, the test wrapped in "IS TRUE" so that it cannot pick
-- an index (WorkerHeartbeatOnly); and with Recent also those whose lease
-- runs past now, from that point of the lease index on
-- (WorkerHeartbeatOnlyRecent).
--
-- Arguments: worker id, [task ids], worker id, [worker id: Recent], renew
-- within ms (-1: every held lease) twice, worker id, lease ms.

-- name: WorkerHeartbeatAll

WITH w AS (
	UPDATE ?schema.workers SET heartbeat_at = now(), status = CASE WHEN status = 'lost' THEN 'running' ELSE status END
	WHERE id = ? RETURNING id
), held AS MATERIALIZED (
	SELECT id, lease_expires_at FROM ?schema.tasks WHERE worker_id = ? AND status IN ('running', 'deferred') AND EXISTS (SELECT 1 FROM w)
), want AS (
	SELECT id FROM held WHERE ?::bigint < 0 OR lease_expires_at < now() + ? * interval '1 millisecond'
), due AS (
	-- A row another transaction has locked is skipped here, and renewed
	-- alone afterwards (see WorkerHeartbeat). Each row is rechecked on
	-- its latest version.
	SELECT t.id FROM ?schema.tasks t
	WHERE t.id = ANY(ARRAY(SELECT id FROM want))
		AND (t.worker_id = ? AND t.status IN ('running', 'deferred')) IS TRUE
	ORDER BY t.id
	FOR UPDATE SKIP LOCKED
), renew AS (
	UPDATE ?schema.tasks t SET lease_expires_at = now() + ? * interval '1 millisecond'
	FROM due WHERE t.id = due.id
	RETURNING t.id
)
-- Joins, not a subquery per held row: a worker may hold ten thousand
-- parked tasks.
SELECT h.id, x.id IS NOT NULL AND r.id IS NULL AS skipped
FROM held h LEFT JOIN want x ON x.id = h.id LEFT JOIN renew r ON r.id = h.id

-- name: WorkerHeartbeatOnly

WITH w AS (
	UPDATE ?schema.workers SET heartbeat_at = now(), status = CASE WHEN status = 'lost' THEN 'running' ELSE status END
	WHERE id = ? RETURNING id
), held AS MATERIALIZED (
	SELECT id, lease_expires_at FROM ?schema.tasks WHERE id = ANY(?::bigint[]) AND (worker_id = ? AND status IN ('running', 'deferred')) IS TRUE AND EXISTS (SELECT 1 FROM w)
), want AS (
	SELECT id FROM held WHERE ?::bigint < 0 OR lease_expires_at < now() + ? * interval '1 millisecond'
), due AS (
	-- A row another transaction has locked is skipped here, and renewed
	-- alone afterwards (see WorkerHeartbeat). Each row is rechecked on
	-- its latest version.
	SELECT t.id FROM ?schema.tasks t
	WHERE t.id = ANY(ARRAY(SELECT id FROM want))
		AND (t.worker_id = ? AND t.status IN ('running', 'deferred')) IS TRUE
	ORDER BY t.id
	FOR UPDATE SKIP LOCKED
), renew AS (
	UPDATE ?schema.tasks t SET lease_expires_at = now() + ? * interval '1 millisecond'
	FROM due WHERE t.id = due.id
	RETURNING t.id
)
-- Joins, not a subquery per held row: a worker may hold ten thousand
-- parked tasks.
SELECT h.id, x.id IS NOT NULL AND r.id IS NULL AS skipped
FROM held h LEFT JOIN want x ON x.id = h.id LEFT JOIN renew r ON r.id = h.id

-- name: WorkerHeartbeatOnlyRecent

WITH w AS (
	UPDATE ?schema.workers SET heartbeat_at = now(), status = CASE WHEN status = 'lost' THEN 'running' ELSE status END
	WHERE id = ? RETURNING id
), held AS MATERIALIZED (
	SELECT id, lease_expires_at FROM ?schema.tasks WHERE id = ANY(?::bigint[]) AND (worker_id = ? AND status IN ('running', 'deferred')) IS TRUE AND EXISTS (SELECT 1 FROM w)
	UNION
	SELECT id, lease_expires_at FROM ?schema.tasks WHERE lease_expires_at > now() AND worker_id = ? AND status IN ('running', 'deferred') AND EXISTS (SELECT 1 FROM w)
), want AS (
	SELECT id FROM held WHERE ?::bigint < 0 OR lease_expires_at < now() + ? * interval '1 millisecond'
), due AS (
	-- A row another transaction has locked is skipped here, and renewed
	-- alone afterwards (see WorkerHeartbeat). Each row is rechecked on
	-- its latest version.
	SELECT t.id FROM ?schema.tasks t
	WHERE t.id = ANY(ARRAY(SELECT id FROM want))
		AND (t.worker_id = ? AND t.status IN ('running', 'deferred')) IS TRUE
	ORDER BY t.id
	FOR UPDATE SKIP LOCKED
), renew AS (
	UPDATE ?schema.tasks t SET lease_expires_at = now() + ? * interval '1 millisecond'
	FROM due WHERE t.id = due.id
	RETURNING t.id
)
-- Joins, not a subquery per held row: a worker may hold ten thousand
-- parked tasks.
SELECT h.id, x.id IS NOT NULL AND r.id IS NULL AS skipped
FROM held h LEFT JOIN want x ON x.id = h.id LEFT JOIN renew r ON r.id = h.id

