-- Rendered by sqlgen_test.go: go test ./store -run TestSQLFiles -update
-- (TestSQLFiles fails while this file differs from what it renders).
-- ?schema is the store's schema, each ? an argument ($1, $2... in order).
-- A worker's parks (running -> deferred) and its next claim in one
-- statement (TaskParkAndClaimOne), one statement per literal LIMIT.

-- name: TaskParkClaimLimit32

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 32
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit64

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 64
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit128

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 128
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit256

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 256
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit512

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 512
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit1024

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 1024
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit2048

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 2048
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit4096

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 4096
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit8192

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 8192
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit16384

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 16384
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit32768

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 32768
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit65536

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 65536
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit131072

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 131072
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit262144

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 262144
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit524288

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 524288
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

-- name: TaskParkClaimLimit1048576

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND v.from_status IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND v.to_status = 'deferred'
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), 
q AS (
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions)) AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n) c
	LIMIT 1048576
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM fin WHERE NOT run_fast GROUP BY run_id
), rs AS (
	UPDATE ?schema.run_rows r SET done_tasks = r.done_tasks + d.done,
	failed_tasks = r.failed_tasks + d.failed,
	cancelled_tasks = r.cancelled_tasks + d.cancelled,
	interrupted_tasks = r.interrupted_tasks + d.interrupted,
	status = CASE
		WHEN r.done_tasks + d.done = r.task_count THEN CASE
			WHEN r.failed_tasks + d.failed > 0 THEN 'failed' WHEN r.cancelled_tasks + d.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN r.interrupted_tasks + d.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR d.started THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(upd.deps) AS i))) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

