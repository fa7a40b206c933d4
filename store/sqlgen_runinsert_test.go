package store

// Templates of the statements of sql/ (see sqlgen_test.go).

// windowPassed holds for a run r whose key is held only by a window that
// has passed: finished, and unique_until is over.
const windowPassed = `r.unique_until <= statement_timestamp() AND r.status NOT IN ('pending', 'running', 'paused', 'interrupted')`

// runInsertStatement inserts runs, their tasks and the creation events that
// carry a detail (see runInsert). Arguments: the runs sequence's table,
// runs (jsonb), the tasks sequence's table, task templates (jsonb),
// events, ready and control channels, false.
//
// A key is held while runs_live_key has it: a live run's key, and a
// windowed run's (unique_until) in any state. rel first frees the keys of
// finished runs whose window has passed (passed finds them; the initplan
// on rel runs it to the end before the first insert), then ins inserts
// the rest; a key held meanwhile by a run this statement cannot see makes
// ins wait for that run's transaction and skip the row, and the caller
// tries again. The lookups are fenced (OFFSET 0) so that each is one
// probe of runs_live_key, however many keys the index holds. wake is the
// condition on the inserted tasks whose queues are announced on the ready
// channel ("false": none, see WithoutWake).
func runInsertStatement(wake string) string {
	return `
WITH x AS (
	SELECT x.*, nextval((SELECT pg_get_serial_sequence(?, 'id')::regclass)) AS id
	FROM jsonb_to_recordset(?::jsonb) AS x(ord int, workflow text, input jsonb, key text, unique_for_us bigint, queue text, priority int, available_at timestamptz, task_count int, detail jsonb, parent_task_id bigint,
		after_deps jsonb, after_pending int, after_rule jsonb, trace_context text, version text)
), tid AS (
	-- The ids of the runs' tasks, drawn ahead: the run row lists them
	-- (runs.task_ids[idx + 1], see migration 022).
	SELECT x.id AS run_id, i.idx, nextval((SELECT pg_get_serial_sequence(?, 'id')::regclass)) AS id
	FROM x CROSS JOIN LATERAL generate_series(0, x.task_count - 1) AS i(idx)
	ORDER BY x.ord, i.idx
), passed AS (
	-- One lookup of runs_live_key per key, whatever the statistics say.
	SELECT h.id FROM x CROSS JOIN LATERAL (
		SELECT r.id FROM ?schema.run_rows r WHERE r.live_key = x.key AND ` + windowPassed + ` OFFSET 0
	) h
	WHERE x.key IS NOT NULL
), rel AS (
	UPDATE ?schema.run_rows r SET unique_until = NULL
	WHERE EXISTS (SELECT FROM passed) AND r.id = ANY(ARRAY(SELECT id FROM passed)) AND ` + windowPassed + `
	RETURNING r.id
), ins AS (
	INSERT INTO ?schema.run_rows (id, workflow, input, idempotency_key, unique_until, queue, priority, task_count, parent_task_id, trace_context, task_ids,
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
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS t(workflow text, version text, idx int, name text, queue text, priority int, deps int[], dependents int[],
		max_attempts int, trigger_rule jsonb, requeue_on_interrupt boolean, max_rescues int,
		conc_group text, conc_path text[], conc_max int, rate_group text, rate_path text[], rate_limit int, rate_per_ms bigint)
), fk AS (
	-- Each task's flow keys: kind, group and the value at the path in
	-- the run input (see FlowKey).
	SELECT x.id AS run_id, t.idx,
		` + concKeyOf + ` AS conc_key,
		` + rateKeyOf + ` AS rate_key,
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
	SELECT f.key, k.max_running, k.rate_limit, k.rate_per_ms FROM ?schema.flow_keys f JOIN fkeys k ON k.key = f.key
	WHERE (f.max_running, f.rate_limit, f.rate_per_ms) IS DISTINCT FROM (k.max_running, k.rate_limit, k.rate_per_ms)
		OR f.updated_at < statement_timestamp() - ` + flowKeyMarkEvery + `
	ORDER BY f.key
	FOR UPDATE OF f
), fupd AS (
	UPDATE ?schema.flow_keys f SET max_running = l.max_running, rate_limit = l.rate_limit, rate_per_ms = l.rate_per_ms,
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
	INSERT INTO ?schema.flow_keys (key, max_running, rate_limit, rate_per_ms, updated_at)
	SELECT k.key, k.max_running, k.rate_limit, k.rate_per_ms, statement_timestamp() FROM fkeys k
	WHERE (SELECT count(*) FROM fupd) >= 0
		AND NOT EXISTS (SELECT 1 FROM ?schema.flow_keys f WHERE f.key = k.key AND f.updated_at >= statement_timestamp() - ` + flowKeyMarkEvery + `)
	ON CONFLICT (key) DO NOTHING
), upd AS (
	INSERT INTO ?schema.tasks (id, run_id, idx, workflow, name, queue, priority, status, max_attempts, available_at,
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
		t.requeue_on_interrupt, t.max_rescues,
		` + concKeyOf + `,
		` + rateKeyOf + `,
		-- A fast run (see migration 019): its task stands for it.
		x.task_count = 1 AND x.key IS NULL AND x.parent_task_id IS NULL AND x.after_deps IS NULL,
		x.version
	-- The runs inserted are read through a hashed subplan (IS TRUE keeps
	-- it from becoming a join), and each task's flow keys are worked out
	-- here rather than joined from fk: planned on CTEs of unknown size,
	-- both were nested loops, quadratic in the runs (an enqueue of 2,000
	-- keyed runs compared 8 million pairs).
	FROM x JOIN tpl t ON t.workflow = x.workflow AND t.version = coalesce(x.version, '') JOIN tid i ON i.run_id = x.id AND i.idx = t.idx
	WHERE (x.id IN (SELECT id FROM ins)) IS TRUE
	ORDER BY x.ord, t.idx
	RETURNING id, run_id, queue, NULL::text AS from_status, status AS to_status, 0 AS attempt, NULL::bigint AS held_by
), rdeps AS (
	INSERT INTO ?schema.run_deps (run_id, after_run_id, status)
	SELECT x.id, a.run, a.status FROM x JOIN ins ON ins.id = x.id
	CROSS JOIN LATERAL jsonb_to_recordset(x.after_deps) AS a(run bigint, status text)
	WHERE x.after_deps IS NOT NULL
), ev AS (
	-- The task row is its own creation record; a creation event is kept
	-- only to say who enqueued (an actor's detail).
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, detail)
	SELECT upd.run_id, upd.id, NULL, upd.to_status, x.detail FROM upd JOIN x ON x.id = upd.run_id
	WHERE x.detail IS NOT NULL
)` + notifyCTEsWhen("upd", wake) + `
SELECT x.ord, coalesce(ins.id, old.id, 0) AS id, ins.id IS NULL AS existing,
	` + notifyForce + ` AS notified
FROM x LEFT JOIN ins ON ins.id = x.id
LEFT JOIN LATERAL (
	-- One index lookup per key. A holder whose window passed (released by
	-- a concurrent enqueue this snapshot predates) is no answer: the
	-- caller tries again and finds the new holder.
	SELECT r.id FROM ?schema.run_rows r WHERE ins.id IS NULL AND r.live_key = x.key AND (` + windowPassed + `) IS NOT TRUE OFFSET 0
) old ON true
ORDER BY x.ord`
}

// concKeyOf and rateKeyOf are the concurrency and rate keys (see
// FlowKey) of template t's task in run x: kind, group and the value at
// the template's path in the run input; NULL without a group.
const (
	concKeyOf = `CASE WHEN t.conc_group IS NOT NULL THEN 'c' || chr(31) || t.conc_group || chr(31)
			|| CASE WHEN cardinality(t.conc_path) > 0 THEN coalesce(x.input #>> t.conc_path, '') ELSE '' END END`
	rateKeyOf = `CASE WHEN t.rate_group IS NOT NULL THEN 'r' || chr(31) || t.rate_group || chr(31)
			|| CASE WHEN cardinality(t.rate_path) > 0 THEN coalesce(x.input #>> t.rate_path, '') ELSE '' END END`
)

// runInsertSQL and runInsertQuietSQL are the run insert, announcing the
// queues of the ready tasks, and without (see WithoutWake).
var (
	runInsertSQL      = runInsertStatement("to_status = 'ready'")
	runInsertQuietSQL = runInsertStatement("false")
)

// flowKeyMarkEvery is how often at most an enqueue marks a key it uses
// (updated_at; see runInsertSQL), as SQL.
const flowKeyMarkEvery = `interval '1 hour'`
