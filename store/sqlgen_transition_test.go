package store

// Templates of the statements of sql/ (see sqlgen_test.go).

// readyInSQL is the condition under which the dec CTE of transitionSQL
// makes an unblocked dependent d ready by itself: the default trigger rule
// (all_success), its dependencies moved by this statement all completed
// (u.ok, u.k of them), and the others (if any: the lookup is skipped when
// this statement moved them all) completed before it. A dependency
// committed by another transaction after this statement's snapshot does
// not count as completed here; the dependent then goes to the Go release,
// which reads it afresh.
var readyInSQL = `d.pending_deps - u.n = 0 AND d.trigger_rule IS NULL AND u.ok
	AND (u.k = cardinality(d.deps) OR u.k + (SELECT count(*) FROM ?schema.tasks p
		WHERE p.id = ANY(` + idsAt("ru.task_ids", "d.deps") + `) AND (p.status = 'completed') IS TRUE) = cardinality(d.deps))`

// runCounters derives, per run of the moved rows in src (columns run_id,
// from_status, to_status, attempt, started_at: the task's first start,
// run_fast), the deltas of
// the run's task counters, whether one of its tasks has now started, and
// the earliest start among them. The task of a fast run counts for
// nothing: its run row is not written (see migration 019).
func runCounters(src string) string {
	return `SELECT run_id,
		sum((to_status IN ` + doneStates + `)::int - (from_status IN ` + doneStates + `)::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM ` + src + ` WHERE NOT run_fast GROUP BY run_id`
}

// runUpdateCTEs are the CTEs delta and rs that fold the moves of src
// (see runCounters) into their runs' counters and status, one update per
// run. rs updates the run row's latest version: a concurrent transition
// of another task of the run, committed meanwhile, is counted (see
// 004_run_counters). A claim does not write the run row, so the first
// write after it stores the run's start: of a one-task run, its task's;
// of a larger run, the earliest of its tasks' (read only then).
func runUpdateCTEs(src string) string {
	return `delta AS (
	` + runCounters(src) + `
), rs AS (
	UPDATE ?schema.run_rows r SET ` + runSet("r.done_tasks + d.done", "r.failed_tasks + d.failed",
		"r.cancelled_tasks + d.cancelled", "r.interrupted_tasks + d.interrupted", "d.started",
		"CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END") + `
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, ` + settleCond + ` AS settle
)`
}

// transitionSet is the SET list of a task row's move to v.to_status (v:
// an item of TransitionParams); from is the expression of the state it
// moves from.
func transitionSet(from string) string {
	return `
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = CASE WHEN coalesce(v.uncounted, false) THEN t.last_error ELSE coalesce(v.error, t.last_error) END,
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN coalesce(v.uncounted, false) THEN t.max_attempts + 1
			WHEN v.to_status = 'ready' AND ` + from + ` IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ` + doneStates + ` THEN greatest(now(), t.started_at) END,
		carried_n = CASE WHEN v.to_status IN ` + doneStates + ` THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ` + doneStates + ` THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()`
}

// freesKeyedPlace is whether an updated row t, which was in state from,
// gave its concurrency key a place back: a keyed task left running.
func freesKeyedPlace(from string) string {
	return `t.conc_key IS NOT NULL AND ` + from + ` = 'running' AND t.status <> 'running'`
}

// transitionItems is the record of a TransitionItem in a statement's
// items (jsonb_to_recordset).
const transitionItems = `v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, uncounted boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)`

// transitionSQL is the CAS statement of transition. Arguments: items
// (jsonb), from states, [worker id], actor, events, ready and control
// channels, whether to announce taken tasks. cur is the select of the
// current rows (cur, see curLocked and curKnown), recheck the conditions
// the update checks on each row's latest version.
func transitionSQL(cur, recheck string) string {
	return `
WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS ` + transitionItems + `
), cur AS (` + cur + `
), upd AS (
	UPDATE ?schema.tasks t SET` + transitionSet("cur.from_status") + `
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
	WHERE t.id = ANY(ARRAY(SELECT id FROM cur)) AND t.id = cur.id` + recheck + `
	RETURNING t.id, t.run_id, t.idx, t.queue, t.status AS to_status, cur.from_status, cur.held_by, t.attempt,
		coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, t.dependents, t.output, v.error, v.detail,
		` + freesKeyedPlace("cur.from_status") + ` AS frees
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
		SELECT u.run_id, dep, sum(CASE WHEN u.to_status IN ` + doneStates + ` THEN 1 ELSE -1 END)::int AS n,
			bool_and(u.to_status = 'completed') AS ok, count(*)::int AS k,
			-- What the dependent carries of its finished dependencies
			-- (see migration 021): how many, and the outputs that are not
			-- null; a move back out of a finished state clears both.
			count(*) FILTER (WHERE u.to_status IN ` + doneStates + `)::int AS fwd,
			jsonb_agg(jsonb_build_array(u.idx, u.output))
				FILTER (WHERE u.to_status IN ` + doneStates + ` AND u.output IS NOT NULL) AS outs,
			bool_or(u.to_status NOT IN ` + doneStates + `) AS back
		FROM upd u CROSS JOIN LATERAL unnest(u.dependents) AS dep
		WHERE (u.to_status IN ` + doneStates + `) <> (u.from_status IN ` + doneStates + `)
		GROUP BY 1, 2 ORDER BY 1, 2
	) y
), dec AS (
	UPDATE ?schema.tasks d SET
		pending_deps = d.pending_deps - u.n,
		status = CASE WHEN ` + readyInSQL + ` THEN 'ready' ELSE d.status END,
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
), ` + runUpdateCTEs("upd") + notifyCTEsWaking("mv", "frees") + `
SELECT u.id, u.run_id, u.queue, u.from_status, u.to_status, u.attempt, u.held_by,
	-- The released and settled ids come once, on the first row: repeated
	-- on each, a batch of a thousand roots that releases eight thousand
	-- dependents printed (and the engine parsed) eight million ids.
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE pending_deps = 0 AND status = 'not_started') END AS unblocked,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE status = 'ready') END AS promoted,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM rs WHERE settle) END AS settle,
	u.first, ` + notifyForce + ` AS notified
FROM (SELECT *, row_number() OVER () = 1 AS first FROM upd) u`
}

// transitionText renders transitionSQL with the conditions of p.
func transitionText(byWorker, leaseExpired, known bool) string {
	if known {
		return transitionSQL(curKnown, recheckKnown)
	}
	var cond string
	if byWorker {
		cond += " AND t.worker_id = ?"
	}
	if leaseExpired {
		cond += " AND t.lease_expires_at < now()"
	}
	return transitionSQL(curLocked(cond), "")
}

// curLocked reads each row by primary key, locked in id order (so that
// two batches never wait on each other crosswise), for its state and
// holder, with the extra conditions cond (worker, lease). "IS TRUE"
// keeps the compare-and-set conditions out of index choice: with stale
// statistics the planner would otherwise scan all of a worker's tasks per
// item.
func curLocked(cond string) string {
	return `
	SELECT t.* FROM (SELECT id, attempt FROM v ORDER BY id) w CROSS JOIN LATERAL (
		SELECT t.id, t.status AS from_status, t.worker_id AS held_by
		FROM ?schema.tasks t
		WHERE t.id = w.id
			AND (t.status = ANY(?::text[]) AND (coalesce(w.attempt, 0) = 0 OR t.attempt = w.attempt)` + cond + `) IS TRUE
		FOR UPDATE
	) t`
}

// The current rows of a transition that need not be read ahead.
const (
	// curKnown is for a worker moving its own tasks whose states it knows
	// (a completion batch): the rows are not read and locked ahead; the
	// update itself checks and locks them (recheckKnown), and a row that
	// moved meanwhile is rechecked on its latest version and left out.
	// The from states are checked against the params' From in Go.
	curKnown = `
	SELECT id, from_status, ?::bigint AS held_by FROM v`
	recheckKnown = `
		AND (t.status = cur.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = cur.held_by) IS TRUE`
)

// doneStates are the states that release dependents: a task in one of them
// counts as finished for its dependents' trigger rules. Interrupted is not
// among them: it waits for an admin.
const doneStates = `('completed', 'failed', 'skipped', 'cancelled')`

// idsAt is the SQL array of the ids at the positions idxs (an int[]
// expression of task idx) of list, a run's task_ids already at hand.
func idsAt(list, idxs string) string {
	return `ARRAY(SELECT ` + list + `[i + 1] FROM unnest(` + idxs + `) AS i)`
}

// runSet is the SET list of a runs update (alias r) that stores the task
// counters given as SQL expressions and the status they imply: a run whose
// tasks are all done is completed, failed (one failed) or cancelled (one
// cancelled, none failed); one with an interrupted task is interrupted; a
// paused run is paused; else it is running once a task started, pending
// before. firstStart is the run's start when it has just started (NULL:
// now).
//
// A transaction's now() is its start: one that waited for a lock behind
// the transaction that started the task (a cancel behind a claim) would
// otherwise write an end before the start it finds. Ends and updates are
// never before the start (here and in the task's finished_at).
func runSet(done, failed, cancelled, interrupted, started, firstStart string) string {
	return `done_tasks = ` + done + `,
	failed_tasks = ` + failed + `,
	cancelled_tasks = ` + cancelled + `,
	interrupted_tasks = ` + interrupted + `,
	status = CASE
		WHEN ` + done + ` = r.task_count THEN CASE
			WHEN ` + failed + ` > 0 THEN 'failed' WHEN ` + cancelled + ` > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN ` + interrupted + ` > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR ` + started + ` THEN 'running'
		ELSE 'pending' END,
	-- The start, worked out once for the three columns (a row
	-- sub-select runs once per row; a larger run's first start reads its
	-- tasks).
	(started_at, finished_at, updated_at) = (
		SELECT s.at, CASE WHEN ` + done + ` = r.task_count THEN coalesce(r.finished_at, greatest(now(), s.at)) END, greatest(now(), s.at)
		FROM (SELECT coalesce(r.started_at, CASE WHEN ` + started + ` THEN coalesce(` + firstStart + `, now()) END) AS at) s)`
}

// settleCond holds for a run row r (after an update) that has finished
// while other runs wait for it: runDepsSettle must count them down.
const settleCond = `(r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled'))`
