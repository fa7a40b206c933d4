-- Rendered by sqlgen_test.go: go test ./store -run TestSQLFiles -update
-- (TestSQLFiles fails while this file differs from what it renders).
-- ?schema is the store's schema, each ? an argument ($1, $2... in order).
-- The compare-and-set transition of a batch of tasks (Transition), one
-- statement per kind of check: rows locked ahead by a worker, with an
-- expired lease, both, or a worker's rows in states it knows. The rows
-- locked ahead by anyone are moved by the function task_transition
-- (sql/functions.sql), whose query the same template renders.

-- name: TaskTransitionByWorker

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), cur AS (
	SELECT t.* FROM (SELECT id, attempt FROM v ORDER BY id) w CROSS JOIN LATERAL (
		SELECT t.id, t.status AS from_status, t.worker_id AS held_by
		FROM ?schema.tasks t
		WHERE t.id = w.id
			AND (t.status = ANY(?::text[]) AND (coalesce(w.attempt, 0) = 0 OR t.attempt = w.attempt) AND t.worker_id = ?) IS TRUE
		FOR UPDATE
	) t
), upd AS (
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
			WHEN v.to_status = 'ready' AND cur.from_status IN ('failed', 'interrupted', 'cancelled')
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
	FROM cur JOIN v ON v.id = cur.id
	-- The rows are named twice: by the array of their ids as well as by
	-- the join. The join alone leaves the access path to statistics, and
	-- a generic plan cached while tasks was small (statements are
	-- prepared once) scans the whole table once it is not: measured, a
	-- completion write took 150-250 ms with a few hundred thousand row
	-- versions held by a long snapshot. With the array an index scan of
	-- the primary key is the cheaper path at any size but the smallest.
	-- (Tuple ids would not do: these rows are not locked ahead, and a TID
	-- scan's recheck drops a version updated meanwhile.) A version
	-- updated meanwhile is followed to its latest and rechecked.
	WHERE t.id = ANY(ARRAY(SELECT id FROM cur)) AND t.id = cur.id
	RETURNING t.id, t.run_id, t.idx, t.queue, t.status AS to_status, cur.from_status, cur.held_by, t.attempt,
		coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, t.dependents, t.output, v.error, v.detail,
		t.conc_key IS NOT NULL AND cur.from_status = 'running' AND t.status <> 'running' AS frees
), x AS (
	-- The dependents to count down, as one row of arrays: unnested below,
	-- the planner expects a few rows and reaches each dependent through
	-- its run's list of task ids and the primary key, however many there
	-- are; (run, position) order is id order (the enqueue draws the ids
	-- in that order), the order row locks are taken in. The aggregates take
	-- their input in the order of the sorted subquery: one sort, where an
	-- ORDER BY in each of the five sorted the dependents five times (a
	-- tenth of a root batch's statement).
	SELECT array_agg(y.run_id) AS runs, array_agg(y.dep) AS idxs, array_agg(y.n) AS ns, array_agg(y.ok) AS oks,
		array_agg(y.k) AS ks, array_agg(y.fwd) AS fwds, array_agg(y.outs) AS outs, array_agg(y.back) AS backs
	FROM (
		SELECT u.run_id, dep, sum(CASE WHEN u.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN 1 ELSE -1 END)::int AS n,
			bool_and(u.to_status = 'completed') AS ok, count(*)::int AS k,
			-- What the dependent carries of its finished dependencies
			-- (see migration 021): how many, and the outputs that are not
			-- null; a move back out of a finished state clears both.
			count(*) FILTER (WHERE u.to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int AS fwd,
			jsonb_agg(jsonb_build_array(u.idx, u.output))
				FILTER (WHERE u.to_status IN ('completed', 'failed', 'skipped', 'cancelled') AND u.output IS NOT NULL) AS outs,
			bool_or(u.to_status NOT IN ('completed', 'failed', 'skipped', 'cancelled')) AS back
		FROM upd u CROSS JOIN LATERAL unnest(u.dependents) AS dep
		WHERE (u.to_status IN ('completed', 'failed', 'skipped', 'cancelled')) <> (u.from_status IN ('completed', 'failed', 'skipped', 'cancelled'))
		GROUP BY 1, 2 ORDER BY 1, 2
	) y
), dec AS (
	UPDATE ?schema.tasks d SET
		pending_deps = d.pending_deps - u.n,
		status = CASE WHEN d.pending_deps - u.n = 0 AND d.trigger_rule IS NULL AND u.ok
	AND (u.k = cardinality(d.deps) OR u.k + (SELECT count(*) FROM ?schema.tasks p
		WHERE p.id = ANY(ARRAY(SELECT ru.task_ids[i + 1] FROM unnest(d.deps) AS i)) AND (p.status = 'completed') IS TRUE) = cardinality(d.deps)) THEN 'ready' ELSE d.status END,
		available_at = CASE WHEN d.pending_deps - u.n = 0 THEN now() ELSE d.available_at END,
		carried_n = CASE WHEN u.back THEN NULL ELSE coalesce(d.carried_n, 0) + u.fwd END,
		carried_outputs = CASE WHEN u.back THEN NULL WHEN u.outs IS NULL THEN d.carried_outputs
			ELSE coalesce(d.carried_outputs, '[]') || u.outs END,
		updated_at = now()
	FROM x CROSS JOIN LATERAL unnest(x.runs, x.idxs, x.ns, x.oks, x.ks, x.fwds, x.outs, x.backs) AS u(run_id, idx, n, ok, k, fwd, outs, back)
	JOIN ?schema.run_rows ru ON ru.id = u.run_id
	-- Each dependent by id, from its run's list (see migration 022).
	-- "IS TRUE" keeps the status test out of index choice; it is still
	-- rechecked on the latest row version.
	WHERE d.id = ru.task_ids[u.idx + 1] AND (d.status = 'not_started') IS TRUE
	RETURNING d.id, d.run_id, d.queue, d.status, d.attempt, d.pending_deps
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, frees FROM upd
	UNION ALL
	SELECT id, run_id, queue, 'not_started', status, attempt, NULL, false FROM dec WHERE status = 'ready'
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, coalesce(?::bigint, held_by), attempt, error, detail FROM upd
	UNION ALL
	SELECT run_id, id, 'not_started', 'ready', NULL, attempt, NULL, NULL FROM dec WHERE status = 'ready'
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM upd WHERE NOT run_fast GROUP BY run_id
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
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready' OR frees) x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
SELECT u.id, u.run_id, u.queue, u.from_status, u.to_status, u.attempt, u.held_by,
	-- The released and settled ids come once, on the first row: repeated
	-- on each, a batch of a thousand roots that releases eight thousand
	-- dependents printed (and the engine parsed) eight million ids.
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE pending_deps = 0 AND status = 'not_started') END AS unblocked,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE status = 'ready') END AS promoted,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM rs WHERE settle) END AS settle,
	u.first, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM (SELECT *, row_number() OVER () = 1 AS first FROM upd) u

-- name: TaskTransitionLeaseExpired

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), cur AS (
	SELECT t.* FROM (SELECT id, attempt FROM v ORDER BY id) w CROSS JOIN LATERAL (
		SELECT t.id, t.status AS from_status, t.worker_id AS held_by
		FROM ?schema.tasks t
		WHERE t.id = w.id
			AND (t.status = ANY(?::text[]) AND (coalesce(w.attempt, 0) = 0 OR t.attempt = w.attempt) AND t.lease_expires_at < now()) IS TRUE
		FOR UPDATE
	) t
), upd AS (
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
			WHEN v.to_status = 'ready' AND cur.from_status IN ('failed', 'interrupted', 'cancelled')
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
	FROM cur JOIN v ON v.id = cur.id
	-- The rows are named twice: by the array of their ids as well as by
	-- the join. The join alone leaves the access path to statistics, and
	-- a generic plan cached while tasks was small (statements are
	-- prepared once) scans the whole table once it is not: measured, a
	-- completion write took 150-250 ms with a few hundred thousand row
	-- versions held by a long snapshot. With the array an index scan of
	-- the primary key is the cheaper path at any size but the smallest.
	-- (Tuple ids would not do: these rows are not locked ahead, and a TID
	-- scan's recheck drops a version updated meanwhile.) A version
	-- updated meanwhile is followed to its latest and rechecked.
	WHERE t.id = ANY(ARRAY(SELECT id FROM cur)) AND t.id = cur.id
	RETURNING t.id, t.run_id, t.idx, t.queue, t.status AS to_status, cur.from_status, cur.held_by, t.attempt,
		coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, t.dependents, t.output, v.error, v.detail,
		t.conc_key IS NOT NULL AND cur.from_status = 'running' AND t.status <> 'running' AS frees
), x AS (
	-- The dependents to count down, as one row of arrays: unnested below,
	-- the planner expects a few rows and reaches each dependent through
	-- its run's list of task ids and the primary key, however many there
	-- are; (run, position) order is id order (the enqueue draws the ids
	-- in that order), the order row locks are taken in. The aggregates take
	-- their input in the order of the sorted subquery: one sort, where an
	-- ORDER BY in each of the five sorted the dependents five times (a
	-- tenth of a root batch's statement).
	SELECT array_agg(y.run_id) AS runs, array_agg(y.dep) AS idxs, array_agg(y.n) AS ns, array_agg(y.ok) AS oks,
		array_agg(y.k) AS ks, array_agg(y.fwd) AS fwds, array_agg(y.outs) AS outs, array_agg(y.back) AS backs
	FROM (
		SELECT u.run_id, dep, sum(CASE WHEN u.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN 1 ELSE -1 END)::int AS n,
			bool_and(u.to_status = 'completed') AS ok, count(*)::int AS k,
			-- What the dependent carries of its finished dependencies
			-- (see migration 021): how many, and the outputs that are not
			-- null; a move back out of a finished state clears both.
			count(*) FILTER (WHERE u.to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int AS fwd,
			jsonb_agg(jsonb_build_array(u.idx, u.output))
				FILTER (WHERE u.to_status IN ('completed', 'failed', 'skipped', 'cancelled') AND u.output IS NOT NULL) AS outs,
			bool_or(u.to_status NOT IN ('completed', 'failed', 'skipped', 'cancelled')) AS back
		FROM upd u CROSS JOIN LATERAL unnest(u.dependents) AS dep
		WHERE (u.to_status IN ('completed', 'failed', 'skipped', 'cancelled')) <> (u.from_status IN ('completed', 'failed', 'skipped', 'cancelled'))
		GROUP BY 1, 2 ORDER BY 1, 2
	) y
), dec AS (
	UPDATE ?schema.tasks d SET
		pending_deps = d.pending_deps - u.n,
		status = CASE WHEN d.pending_deps - u.n = 0 AND d.trigger_rule IS NULL AND u.ok
	AND (u.k = cardinality(d.deps) OR u.k + (SELECT count(*) FROM ?schema.tasks p
		WHERE p.id = ANY(ARRAY(SELECT ru.task_ids[i + 1] FROM unnest(d.deps) AS i)) AND (p.status = 'completed') IS TRUE) = cardinality(d.deps)) THEN 'ready' ELSE d.status END,
		available_at = CASE WHEN d.pending_deps - u.n = 0 THEN now() ELSE d.available_at END,
		carried_n = CASE WHEN u.back THEN NULL ELSE coalesce(d.carried_n, 0) + u.fwd END,
		carried_outputs = CASE WHEN u.back THEN NULL WHEN u.outs IS NULL THEN d.carried_outputs
			ELSE coalesce(d.carried_outputs, '[]') || u.outs END,
		updated_at = now()
	FROM x CROSS JOIN LATERAL unnest(x.runs, x.idxs, x.ns, x.oks, x.ks, x.fwds, x.outs, x.backs) AS u(run_id, idx, n, ok, k, fwd, outs, back)
	JOIN ?schema.run_rows ru ON ru.id = u.run_id
	-- Each dependent by id, from its run's list (see migration 022).
	-- "IS TRUE" keeps the status test out of index choice; it is still
	-- rechecked on the latest row version.
	WHERE d.id = ru.task_ids[u.idx + 1] AND (d.status = 'not_started') IS TRUE
	RETURNING d.id, d.run_id, d.queue, d.status, d.attempt, d.pending_deps
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, frees FROM upd
	UNION ALL
	SELECT id, run_id, queue, 'not_started', status, attempt, NULL, false FROM dec WHERE status = 'ready'
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, coalesce(?::bigint, held_by), attempt, error, detail FROM upd
	UNION ALL
	SELECT run_id, id, 'not_started', 'ready', NULL, attempt, NULL, NULL FROM dec WHERE status = 'ready'
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM upd WHERE NOT run_fast GROUP BY run_id
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
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready' OR frees) x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
SELECT u.id, u.run_id, u.queue, u.from_status, u.to_status, u.attempt, u.held_by,
	-- The released and settled ids come once, on the first row: repeated
	-- on each, a batch of a thousand roots that releases eight thousand
	-- dependents printed (and the engine parsed) eight million ids.
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE pending_deps = 0 AND status = 'not_started') END AS unblocked,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE status = 'ready') END AS promoted,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM rs WHERE settle) END AS settle,
	u.first, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM (SELECT *, row_number() OVER () = 1 AS first FROM upd) u

-- name: TaskTransitionByWorkerLeaseExpired

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), cur AS (
	SELECT t.* FROM (SELECT id, attempt FROM v ORDER BY id) w CROSS JOIN LATERAL (
		SELECT t.id, t.status AS from_status, t.worker_id AS held_by
		FROM ?schema.tasks t
		WHERE t.id = w.id
			AND (t.status = ANY(?::text[]) AND (coalesce(w.attempt, 0) = 0 OR t.attempt = w.attempt) AND t.worker_id = ? AND t.lease_expires_at < now()) IS TRUE
		FOR UPDATE
	) t
), upd AS (
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
			WHEN v.to_status = 'ready' AND cur.from_status IN ('failed', 'interrupted', 'cancelled')
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
	FROM cur JOIN v ON v.id = cur.id
	-- The rows are named twice: by the array of their ids as well as by
	-- the join. The join alone leaves the access path to statistics, and
	-- a generic plan cached while tasks was small (statements are
	-- prepared once) scans the whole table once it is not: measured, a
	-- completion write took 150-250 ms with a few hundred thousand row
	-- versions held by a long snapshot. With the array an index scan of
	-- the primary key is the cheaper path at any size but the smallest.
	-- (Tuple ids would not do: these rows are not locked ahead, and a TID
	-- scan's recheck drops a version updated meanwhile.) A version
	-- updated meanwhile is followed to its latest and rechecked.
	WHERE t.id = ANY(ARRAY(SELECT id FROM cur)) AND t.id = cur.id
	RETURNING t.id, t.run_id, t.idx, t.queue, t.status AS to_status, cur.from_status, cur.held_by, t.attempt,
		coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, t.dependents, t.output, v.error, v.detail,
		t.conc_key IS NOT NULL AND cur.from_status = 'running' AND t.status <> 'running' AS frees
), x AS (
	-- The dependents to count down, as one row of arrays: unnested below,
	-- the planner expects a few rows and reaches each dependent through
	-- its run's list of task ids and the primary key, however many there
	-- are; (run, position) order is id order (the enqueue draws the ids
	-- in that order), the order row locks are taken in. The aggregates take
	-- their input in the order of the sorted subquery: one sort, where an
	-- ORDER BY in each of the five sorted the dependents five times (a
	-- tenth of a root batch's statement).
	SELECT array_agg(y.run_id) AS runs, array_agg(y.dep) AS idxs, array_agg(y.n) AS ns, array_agg(y.ok) AS oks,
		array_agg(y.k) AS ks, array_agg(y.fwd) AS fwds, array_agg(y.outs) AS outs, array_agg(y.back) AS backs
	FROM (
		SELECT u.run_id, dep, sum(CASE WHEN u.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN 1 ELSE -1 END)::int AS n,
			bool_and(u.to_status = 'completed') AS ok, count(*)::int AS k,
			-- What the dependent carries of its finished dependencies
			-- (see migration 021): how many, and the outputs that are not
			-- null; a move back out of a finished state clears both.
			count(*) FILTER (WHERE u.to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int AS fwd,
			jsonb_agg(jsonb_build_array(u.idx, u.output))
				FILTER (WHERE u.to_status IN ('completed', 'failed', 'skipped', 'cancelled') AND u.output IS NOT NULL) AS outs,
			bool_or(u.to_status NOT IN ('completed', 'failed', 'skipped', 'cancelled')) AS back
		FROM upd u CROSS JOIN LATERAL unnest(u.dependents) AS dep
		WHERE (u.to_status IN ('completed', 'failed', 'skipped', 'cancelled')) <> (u.from_status IN ('completed', 'failed', 'skipped', 'cancelled'))
		GROUP BY 1, 2 ORDER BY 1, 2
	) y
), dec AS (
	UPDATE ?schema.tasks d SET
		pending_deps = d.pending_deps - u.n,
		status = CASE WHEN d.pending_deps - u.n = 0 AND d.trigger_rule IS NULL AND u.ok
	AND (u.k = cardinality(d.deps) OR u.k + (SELECT count(*) FROM ?schema.tasks p
		WHERE p.id = ANY(ARRAY(SELECT ru.task_ids[i + 1] FROM unnest(d.deps) AS i)) AND (p.status = 'completed') IS TRUE) = cardinality(d.deps)) THEN 'ready' ELSE d.status END,
		available_at = CASE WHEN d.pending_deps - u.n = 0 THEN now() ELSE d.available_at END,
		carried_n = CASE WHEN u.back THEN NULL ELSE coalesce(d.carried_n, 0) + u.fwd END,
		carried_outputs = CASE WHEN u.back THEN NULL WHEN u.outs IS NULL THEN d.carried_outputs
			ELSE coalesce(d.carried_outputs, '[]') || u.outs END,
		updated_at = now()
	FROM x CROSS JOIN LATERAL unnest(x.runs, x.idxs, x.ns, x.oks, x.ks, x.fwds, x.outs, x.backs) AS u(run_id, idx, n, ok, k, fwd, outs, back)
	JOIN ?schema.run_rows ru ON ru.id = u.run_id
	-- Each dependent by id, from its run's list (see migration 022).
	-- "IS TRUE" keeps the status test out of index choice; it is still
	-- rechecked on the latest row version.
	WHERE d.id = ru.task_ids[u.idx + 1] AND (d.status = 'not_started') IS TRUE
	RETURNING d.id, d.run_id, d.queue, d.status, d.attempt, d.pending_deps
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, frees FROM upd
	UNION ALL
	SELECT id, run_id, queue, 'not_started', status, attempt, NULL, false FROM dec WHERE status = 'ready'
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, coalesce(?::bigint, held_by), attempt, error, detail FROM upd
	UNION ALL
	SELECT run_id, id, 'not_started', 'ready', NULL, attempt, NULL, NULL FROM dec WHERE status = 'ready'
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM upd WHERE NOT run_fast GROUP BY run_id
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
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready' OR frees) x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
SELECT u.id, u.run_id, u.queue, u.from_status, u.to_status, u.attempt, u.held_by,
	-- The released and settled ids come once, on the first row: repeated
	-- on each, a batch of a thousand roots that releases eight thousand
	-- dependents printed (and the engine parsed) eight million ids.
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE pending_deps = 0 AND status = 'not_started') END AS unblocked,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE status = 'ready') END AS promoted,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM rs WHERE settle) END AS settle,
	u.first, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM (SELECT *, row_number() OVER () = 1 AS first FROM upd) u

-- name: TaskTransitionKnown

WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), cur AS (
	SELECT id, from_status, ?::bigint AS held_by FROM v
), upd AS (
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
			WHEN v.to_status = 'ready' AND cur.from_status IN ('failed', 'interrupted', 'cancelled')
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
	FROM cur JOIN v ON v.id = cur.id
	-- The rows are named twice: by the array of their ids as well as by
	-- the join. The join alone leaves the access path to statistics, and
	-- a generic plan cached while tasks was small (statements are
	-- prepared once) scans the whole table once it is not: measured, a
	-- completion write took 150-250 ms with a few hundred thousand row
	-- versions held by a long snapshot. With the array an index scan of
	-- the primary key is the cheaper path at any size but the smallest.
	-- (Tuple ids would not do: these rows are not locked ahead, and a TID
	-- scan's recheck drops a version updated meanwhile.) A version
	-- updated meanwhile is followed to its latest and rechecked.
	WHERE t.id = ANY(ARRAY(SELECT id FROM cur)) AND t.id = cur.id
		AND (t.status = cur.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = cur.held_by) IS TRUE
	RETURNING t.id, t.run_id, t.idx, t.queue, t.status AS to_status, cur.from_status, cur.held_by, t.attempt,
		coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, t.dependents, t.output, v.error, v.detail,
		t.conc_key IS NOT NULL AND cur.from_status = 'running' AND t.status <> 'running' AS frees
), x AS (
	-- The dependents to count down, as one row of arrays: unnested below,
	-- the planner expects a few rows and reaches each dependent through
	-- its run's list of task ids and the primary key, however many there
	-- are; (run, position) order is id order (the enqueue draws the ids
	-- in that order), the order row locks are taken in. The aggregates take
	-- their input in the order of the sorted subquery: one sort, where an
	-- ORDER BY in each of the five sorted the dependents five times (a
	-- tenth of a root batch's statement).
	SELECT array_agg(y.run_id) AS runs, array_agg(y.dep) AS idxs, array_agg(y.n) AS ns, array_agg(y.ok) AS oks,
		array_agg(y.k) AS ks, array_agg(y.fwd) AS fwds, array_agg(y.outs) AS outs, array_agg(y.back) AS backs
	FROM (
		SELECT u.run_id, dep, sum(CASE WHEN u.to_status IN ('completed', 'failed', 'skipped', 'cancelled') THEN 1 ELSE -1 END)::int AS n,
			bool_and(u.to_status = 'completed') AS ok, count(*)::int AS k,
			-- What the dependent carries of its finished dependencies
			-- (see migration 021): how many, and the outputs that are not
			-- null; a move back out of a finished state clears both.
			count(*) FILTER (WHERE u.to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int AS fwd,
			jsonb_agg(jsonb_build_array(u.idx, u.output))
				FILTER (WHERE u.to_status IN ('completed', 'failed', 'skipped', 'cancelled') AND u.output IS NOT NULL) AS outs,
			bool_or(u.to_status NOT IN ('completed', 'failed', 'skipped', 'cancelled')) AS back
		FROM upd u CROSS JOIN LATERAL unnest(u.dependents) AS dep
		WHERE (u.to_status IN ('completed', 'failed', 'skipped', 'cancelled')) <> (u.from_status IN ('completed', 'failed', 'skipped', 'cancelled'))
		GROUP BY 1, 2 ORDER BY 1, 2
	) y
), dec AS (
	UPDATE ?schema.tasks d SET
		pending_deps = d.pending_deps - u.n,
		status = CASE WHEN d.pending_deps - u.n = 0 AND d.trigger_rule IS NULL AND u.ok
	AND (u.k = cardinality(d.deps) OR u.k + (SELECT count(*) FROM ?schema.tasks p
		WHERE p.id = ANY(ARRAY(SELECT ru.task_ids[i + 1] FROM unnest(d.deps) AS i)) AND (p.status = 'completed') IS TRUE) = cardinality(d.deps)) THEN 'ready' ELSE d.status END,
		available_at = CASE WHEN d.pending_deps - u.n = 0 THEN now() ELSE d.available_at END,
		carried_n = CASE WHEN u.back THEN NULL ELSE coalesce(d.carried_n, 0) + u.fwd END,
		carried_outputs = CASE WHEN u.back THEN NULL WHEN u.outs IS NULL THEN d.carried_outputs
			ELSE coalesce(d.carried_outputs, '[]') || u.outs END,
		updated_at = now()
	FROM x CROSS JOIN LATERAL unnest(x.runs, x.idxs, x.ns, x.oks, x.ks, x.fwds, x.outs, x.backs) AS u(run_id, idx, n, ok, k, fwd, outs, back)
	JOIN ?schema.run_rows ru ON ru.id = u.run_id
	-- Each dependent by id, from its run's list (see migration 022).
	-- "IS TRUE" keeps the status test out of index choice; it is still
	-- rechecked on the latest row version.
	WHERE d.id = ru.task_ids[u.idx + 1] AND (d.status = 'not_started') IS TRUE
	RETURNING d.id, d.run_id, d.queue, d.status, d.attempt, d.pending_deps
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, frees FROM upd
	UNION ALL
	SELECT id, run_id, queue, 'not_started', status, attempt, NULL, false FROM dec WHERE status = 'ready'
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, coalesce(?::bigint, held_by), attempt, error, detail FROM upd
	UNION ALL
	SELECT run_id, id, 'not_started', 'ready', NULL, attempt, NULL, NULL FROM dec WHERE status = 'ready'
), delta AS (
	SELECT run_id,
		sum((to_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int - (from_status IN ('completed', 'failed', 'skipped', 'cancelled'))::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM upd WHERE NOT run_fast GROUP BY run_id
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
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready' OR frees) x
), ctl AS (
	SELECT pg_notify(?, json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
SELECT u.id, u.run_id, u.queue, u.from_status, u.to_status, u.attempt, u.held_by,
	-- The released and settled ids come once, on the first row: repeated
	-- on each, a batch of a thousand roots that releases eight thousand
	-- dependents printed (and the engine parsed) eight million ids.
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE pending_deps = 0 AND status = 'not_started') END AS unblocked,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE status = 'ready') END AS promoted,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM rs WHERE settle) END AS settle,
	u.first, (SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM (SELECT *, row_number() OVER () = 1 AS first FROM upd) u

