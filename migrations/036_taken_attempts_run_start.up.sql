-- Two changes to the queries of run_insert_once and task_transition,
-- the functions whose queries the store's templates render (their
-- signatures, and everything else they do, are as migration 035 made
-- them):
--
-- * A control message of kind "taken" names the attempt of each task it
--   takes ("a", in the order of "t"): the worker that rescued a task may
--   claim it again before it hears the message, and a handler stops only
--   when the attempt it runs is the one taken.
-- * task_transition works out a run's start once, not once for each of
--   started_at, finished_at and updated_at: at a larger run's first
--   write the start reads the run's tasks.

CREATE OR REPLACE FUNCTION run_insert_once(p_runs jsonb, p_templates jsonb, p_wake boolean)
RETURNS TABLE (ord int, id bigint, existing boolean, notified bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY

WITH x AS (
	SELECT x.*, nextval((SELECT pg_get_serial_sequence('run_rows', 'id')::regclass)) AS id
	FROM jsonb_to_recordset(p_runs::jsonb) AS x(ord int, workflow text, input jsonb, key text, unique_for_us bigint, queue text, priority int, available_at timestamptz, task_count int, detail jsonb, parent_task_id bigint,
		after_deps jsonb, after_pending int, after_rule jsonb, trace_context text, version text)
), tid AS (
	-- The ids of the runs' tasks, drawn ahead: the run row lists them
	-- (runs.task_ids[idx + 1], see migration 022).
	SELECT x.id AS run_id, i.idx, nextval((SELECT pg_get_serial_sequence('tasks', 'id')::regclass)) AS id
	FROM x CROSS JOIN LATERAL generate_series(0, x.task_count - 1) AS i(idx)
	ORDER BY x.ord, i.idx
), passed AS (
	-- One lookup of runs_live_key per key, whatever the statistics say.
	SELECT h.id FROM x CROSS JOIN LATERAL (
		SELECT r.id FROM run_rows r WHERE r.live_key = x.key AND r.unique_until <= statement_timestamp() AND r.status NOT IN ('pending', 'running', 'paused', 'interrupted') OFFSET 0
	) h
	WHERE x.key IS NOT NULL
), rel AS (
	UPDATE run_rows r SET unique_until = NULL
	WHERE EXISTS (SELECT FROM passed) AND r.id = ANY(ARRAY(SELECT id FROM passed)) AND r.unique_until <= statement_timestamp() AND r.status NOT IN ('pending', 'running', 'paused', 'interrupted')
	RETURNING r.id
), ins AS (
	INSERT INTO run_rows (id, workflow, input, idempotency_key, unique_until, queue, priority, task_count, parent_task_id, trace_context, task_ids,
		version)
	SELECT x.id, x.workflow, x.input, x.key, now() + x.unique_for_us * interval '1 microsecond', x.queue, x.priority, x.task_count, x.parent_task_id,
		x.trace_context, coalesce(t.ids, '{}'), x.version
	FROM x LEFT JOIN (SELECT run_id, array_agg(id ORDER BY idx) AS ids FROM tid GROUP BY run_id) t ON t.run_id = x.id
	WHERE (SELECT count(*) FROM rel) >= 0
	ORDER BY x.ord
	ON CONFLICT (live_key) WHERE live_key IS NOT NULL
	DO NOTHING
	RETURNING id
), tpl AS (
	-- Each workflow's templates, per version ('': none; see RunInsertParams.Version).
	SELECT * FROM jsonb_to_recordset(p_templates::jsonb) AS t(workflow text, version text, idx int, name text, queue text, priority int, deps int[], dependents int[],
		max_attempts int, trigger_rule jsonb, requeue_on_interrupt boolean, max_rescues int,
		conc_group text, conc_path text[], conc_max int, rate_group text, rate_path text[], rate_limit int, rate_per_ms bigint)
), fk AS (
	-- Each task's flow keys: kind, group and the value at the path in
	-- the run input (see FlowKey).
	SELECT x.id AS run_id, t.idx,
		CASE WHEN t.conc_group IS NOT NULL THEN 'c' || chr(31) || t.conc_group || chr(31)
			|| CASE WHEN cardinality(t.conc_path) > 0 THEN coalesce(x.input #>> t.conc_path, '') ELSE '' END END AS conc_key,
		CASE WHEN t.rate_group IS NOT NULL THEN 'r' || chr(31) || t.rate_group || chr(31)
			|| CASE WHEN cardinality(t.rate_path) > 0 THEN coalesce(x.input #>> t.rate_path, '') ELSE '' END END AS rate_key,
		t.conc_max, t.rate_limit, t.rate_per_ms
	FROM x JOIN tpl t ON t.workflow = x.workflow AND t.version = coalesce(x.version, '')
	WHERE t.conc_group IS NOT NULL OR t.rate_group IS NOT NULL
), fkeys AS (
	SELECT DISTINCT ON (key) * FROM (
		SELECT conc_key AS key, conc_max AS max_running, NULL::int AS rate_limit, NULL::bigint AS rate_per_ms FROM fk WHERE conc_key IS NOT NULL
		UNION ALL
		SELECT rate_key, NULL, rate_limit, rate_per_ms FROM fk WHERE rate_key IS NOT NULL
	) k ORDER BY key
), flock AS (
	-- The key rows this enqueue writes, locked in key order, so that two
	-- enqueues never deadlock on them: a key whose declared limit changed
	-- (it takes the new one), and a key last marked used (updated_at)
	-- over an hour ago (it is marked again). An idle key's row is pruned
	-- (see FlowKeyPrune), and this lock, held until commit, keeps the
	-- prune off a key this enqueue uses. Only these rows are locked, so
	-- claims (which skip locked key rows) meet an enqueue's lock at most
	-- once an hour per key.
	SELECT f.key, k.max_running, k.rate_limit, k.rate_per_ms FROM flow_keys f JOIN fkeys k ON k.key = f.key
	WHERE (f.max_running, f.rate_limit, f.rate_per_ms) IS DISTINCT FROM (k.max_running, k.rate_limit, k.rate_per_ms)
		OR f.updated_at < statement_timestamp() - interval '1 hour'
	ORDER BY f.key
	FOR UPDATE OF f
), fupd AS (
	UPDATE flow_keys f SET max_running = l.max_running, rate_limit = l.rate_limit, rate_per_ms = l.rate_per_ms,
		updated_at = statement_timestamp()
	FROM flock l
	WHERE f.key = l.key
	RETURNING f.key
), fins AS (
	-- New keys are inserted, after fupd has run to the end (the initplan):
	-- a key a prune deleted before fupd could lock it is inserted again
	-- here (see FlowKeyPrune). A key this statement's snapshot shows
	-- marked within the hour is left out: no prune deletes it before an
	-- hour has passed (see FlowKeyPruneMinIdle), and ON CONFLICT would
	-- wait for every claim in flight that updated its row (claims count
	-- on it): measured, 134 ms of an enqueue of 328 keyed runs.
	INSERT INTO flow_keys (key, max_running, rate_limit, rate_per_ms, updated_at)
	SELECT k.key, k.max_running, k.rate_limit, k.rate_per_ms, statement_timestamp() FROM fkeys k
	WHERE (SELECT count(*) FROM fupd) >= 0
		AND NOT EXISTS (SELECT 1 FROM flow_keys f WHERE f.key = k.key AND f.updated_at >= statement_timestamp() - interval '1 hour')
	ON CONFLICT (key) DO NOTHING
), upd AS (
	INSERT INTO tasks (id, run_id, idx, workflow, name, queue, priority, status, max_attempts, available_at,
		deps, dependents, pending_deps, trigger_rule, requeue_on_interrupt, max_rescues, conc_key, rate_key, run_fast, version)
	-- The roots of a run with run dependencies wait for them (see
	-- runInsertAfter), with the run's rule when it gives one.
	SELECT i.id, x.id, t.idx, x.workflow, t.name, coalesce(t.queue, x.queue), coalesce(t.priority, x.priority),
		CASE WHEN cardinality(t.deps) = 0 AND x.after_deps IS NULL THEN 'ready' ELSE 'not_started' END,
		-- Never before now: a task is not available before it exists, and
		-- a claim scans from the queue's floor (see ClaimFloor).
		t.max_attempts, greatest(x.available_at, now()), t.deps, t.dependents,
		cardinality(t.deps) + CASE WHEN cardinality(t.deps) = 0 THEN coalesce(x.after_pending, 0) ELSE 0 END,
		CASE WHEN cardinality(t.deps) = 0 AND x.after_rule IS NOT NULL THEN x.after_rule ELSE t.trigger_rule END,
		t.requeue_on_interrupt, t.max_rescues, fk.conc_key, fk.rate_key,
		-- A fast run (see migration 019): its task stands for it.
		x.task_count = 1 AND x.key IS NULL AND x.parent_task_id IS NULL AND x.after_deps IS NULL,
		x.version
	FROM x JOIN ins ON ins.id = x.id JOIN tpl t ON t.workflow = x.workflow AND t.version = coalesce(x.version, '') JOIN tid i ON i.run_id = x.id AND i.idx = t.idx
	LEFT JOIN fk ON fk.run_id = x.id AND fk.idx = t.idx
	ORDER BY x.ord, t.idx
	RETURNING id, run_id, queue, NULL::text AS from_status, status AS to_status, 0 AS attempt, NULL::bigint AS held_by
), rdeps AS (
	INSERT INTO run_deps (run_id, after_run_id, status)
	SELECT x.id, a.run, a.status FROM x JOIN ins ON ins.id = x.id
	CROSS JOIN LATERAL jsonb_to_recordset(x.after_deps) AS a(run bigint, status text)
	WHERE x.after_deps IS NOT NULL
), ev AS (
	-- The task row is its own creation record; a creation event is kept
	-- only to say who enqueued (an actor's detail).
	INSERT INTO task_events (run_id, task_id, from_status, to_status, detail)
	SELECT upd.run_id, upd.id, NULL, upd.to_status, x.detail FROM upd JOIN x ON x.id = upd.run_id
	WHERE x.detail IS NOT NULL
)
, note AS (
	SELECT pg_notify(current_schema() || '_events', json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM upd
	      WHERE EXISTS (SELECT 1 FROM event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(current_schema() || '_ready', queue) FROM (SELECT DISTINCT queue FROM upd WHERE p_wake AND to_status = 'ready') x
), ctl AS (
	SELECT pg_notify(current_schema() || '_control', json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM upd
	      WHERE false::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)
SELECT x.ord, coalesce(ins.id, old.id, 0) AS id, ins.id IS NULL AS existing,
	(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl) AS notified
FROM x LEFT JOIN ins ON ins.id = x.id
LEFT JOIN LATERAL (
	-- One index lookup per key. A holder whose window passed (released by
	-- a concurrent enqueue this snapshot predates) is no answer: the
	-- caller tries again and finds the new holder.
	SELECT r.id FROM run_rows r WHERE ins.id IS NULL AND r.live_key = x.key AND (r.unique_until <= statement_timestamp() AND r.status NOT IN ('pending', 'running', 'paused', 'interrupted')) IS NOT TRUE OFFSET 0
) old ON true
ORDER BY x.ord
;
END
$fn$;

CREATE OR REPLACE FUNCTION task_transition(p_items jsonb, p_from text[])
RETURNS TABLE (id bigint, run_id bigint, queue text, from_status text, to_status text, attempt int, held_by bigint,
    unblocked bigint[], promoted bigint[], settle bigint[], first boolean, notified bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
BEGIN
RETURN QUERY

WITH v AS (
	SELECT * FROM jsonb_to_recordset(p_items::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)
), cur AS (
	SELECT t.* FROM (SELECT id, attempt FROM v ORDER BY id) w CROSS JOIN LATERAL (
		SELECT t.id, t.status AS from_status, t.worker_id AS held_by
		FROM tasks t
		WHERE t.id = w.id
			AND (t.status = ANY(p_from::text[]) AND (coalesce(w.attempt, 0) = 0 OR t.attempt = w.attempt)) IS TRUE
		FOR UPDATE
	) t
), upd AS (
	UPDATE tasks t SET
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
	UPDATE tasks d SET
		pending_deps = d.pending_deps - u.n,
		status = CASE WHEN d.pending_deps - u.n = 0 AND d.trigger_rule IS NULL AND u.ok
	AND (u.k = cardinality(d.deps) OR u.k + (SELECT count(*) FROM tasks p
		WHERE p.id = ANY(ARRAY(SELECT ru.task_ids[i + 1] FROM unnest(d.deps) AS i)) AND (p.status = 'completed') IS TRUE) = cardinality(d.deps)) THEN 'ready' ELSE d.status END,
		available_at = CASE WHEN d.pending_deps - u.n = 0 THEN now() ELSE d.available_at END,
		carried_n = CASE WHEN u.back THEN NULL ELSE coalesce(d.carried_n, 0) + u.fwd END,
		carried_outputs = CASE WHEN u.back THEN NULL WHEN u.outs IS NULL THEN d.carried_outputs
			ELSE coalesce(d.carried_outputs, '[]') || u.outs END,
		updated_at = now()
	FROM x CROSS JOIN LATERAL unnest(x.runs, x.idxs, x.ns, x.oks, x.ks, x.fwds, x.outs, x.backs) AS u(run_id, idx, n, ok, k, fwd, outs, back)
	JOIN run_rows ru ON ru.id = u.run_id
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
	INSERT INTO task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, coalesce(NULL::bigint, held_by), attempt, error, detail FROM upd
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
	UPDATE run_rows r SET done_tasks = r.done_tasks + d.done,
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
		FROM (SELECT coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END) AS at) s)
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle
)
, note AS (
	SELECT pg_notify(current_schema() || '_events', json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text)
	FROM (SELECT *, (row_number() OVER () - 1) / 40 AS grp FROM mv
	      WHERE EXISTS (SELECT 1 FROM event_listeners WHERE expires_at > now())) x GROUP BY grp
), wake AS (
	SELECT pg_notify(current_schema() || '_ready', queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready' OR frees) x
), ctl AS (
	SELECT pg_notify(current_schema() || '_control', json_build_object('k', 'taken', 't', json_agg(id), 'a', json_agg(attempt))::text)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / 200 AS grp FROM mv
	      WHERE true::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
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
;
END
$fn$;
