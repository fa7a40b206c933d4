-- Rendered by sqlgen_test.go: go test ./store -run TestSQLFiles -update
-- (TestSQLFiles fails while this file differs from what it renders).
-- ?schema is the store's schema, each ? an argument ($1, $2... in order).
-- The unkeyed claim (TaskClaim), one statement per literal LIMIT (see
-- limitBucket), and the read of a queue's claim floor (TaskClaimFloor).

-- name: TaskClaimLimit32

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit64

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit128

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit256

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit512

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit1024

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit2048

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit4096

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit8192

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit16384

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit32768

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit65536

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit131072

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit262144

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit524288

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimLimit1048576

WITH
q AS (
	SELECT q.name, q.n, q.fp::int AS fp,
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
		t.carried_n, t.carried_outputs, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)
, note AS (
	SELECT pg_notify(?, json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM upd WHERE to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
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
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id

-- name: TaskClaimFloor

SELECT t.priority, t.available_at FROM (SELECT p.name, (p.w).handles, (p.w).versions
		FROM (SELECT ?::text AS name, (SELECT w FROM ?schema.workers w WHERE w.id = ?) AS w) p) q
	CROSS JOIN LATERAL (SELECT t.priority, t.available_at, t.id FROM ?schema.tasks t WHERE t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND (t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions))
		ORDER BY t.priority, t.available_at, t.id LIMIT 1) t

