package store

import "strconv"

// Templates of the statements of sql/ (see sqlgen_test.go).

// floorTime reads a floor time written by floorMicros (the SQL
// expression micros) back as a timestamptz, -infinity for none.
func floorTime(micros string) string {
	return `CASE WHEN ` + micros + ` = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + ` + micros + ` * interval '1 microsecond' END`
}

// claimCTEs are the claim's CTEs q (queues asked, with the claiming
// worker's handles), cand (ready rows locked with SKIP LOCKED) and upd
// (those rows moved to running), up to upd's RETURNING t.*, which the
// statement using them completes. Arguments: queues, limits, worker id
// (its handles), worker id, lease ms. queues is the q CTE's select
// (claimQueues, or parkClaimQueues); limit is a literal LIMIT (see
// TaskClaim). It takes only unkeyed tasks; keyedClaimCTEs takes keyed
// ones too (see flow.go).
//
// Routing: cand takes only tasks whose "workflow.task" is among the
// worker's handles, read once per queue asked (NULL, or no worker row:
// any task).
func claimCTEs(queues string, limit int) string {
	return `
q AS (` + queues + `
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (` + claimScan + `) c
	LIMIT ` + strconv.Itoa(limit) + `
), ` + claimUpdate
}

// claimQueues selects the queues asked (name, n, floor) that are not
// paused, with the claiming worker's handles. Arguments: queues, limits,
// floor priorities, floor times (see ClaimParams.floorArgs), worker id.
// The arrays are read through subqueries: of a literal array (a custom
// plan's parameter) the planner counts the elements, of a subquery it
// guesses ten, as of a generic plan's parameter. With both guesses alike,
// the generic plan costs what a custom one does and PostgreSQL settles
// on it instead of planning every execution afresh (see
// TestClaimStatementsCostTheSameWithAndWithoutTheirValues).
var claimQueues = `
	SELECT q.name, q.n, ` + claimFloorColumns + `, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)`

// claimFloorColumns turns a queue's floor arguments (q.fp, q.fa) into
// the claim scan's start (fp, fa).
var claimFloorColumns = `q.fp::int AS fp,
		` + floorTime("q.fa") + ` AS fa`

// claimScan locks up to q.n unkeyed ready rows of queue q.name whose
// time has come, of unpaused runs, in claim order, starting at the
// queue's floor (q.fp, q.fa; see ClaimFloor): first the tasks of higher
// priority than the floor's (a lower number; these are never skipped, as
// a new task may have any priority), then, from the floor on, the rest.
// The floor is a row comparison on the claim index's columns after
// queue, so the second index scan starts at it, not at the queue's first
// entry.
const claimScan = `
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE ` + claimable + ` AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE ` + claimable + ` AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n`

// claimable is what makes a task t of queue q claimable by the worker
// whose handles are q.handles and versions q.versions: ready, unkeyed,
// its time come, its run not paused, its handler there, its version
// served (see servedByQ).
const claimable = `t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
			AND ` + servedByQ

// servedByQ is the version routing of a task t for the worker whose
// versions are q.versions (migration 029): a task of a run from before
// versions (NULL) goes to any worker, as does any task to a worker that
// declared no versions (NULL); else its "workflow@version" must be among
// the worker's. One array membership test, as the handles' test.
// servedByLk is the same over lk.versions (the keyed claim).
const (
	servedByQ  = `(t.version IS NULL OR q.versions IS NULL OR t.workflow || '@' || t.version = ANY(q.versions))`
	servedByLk = `(t.version IS NULL OR lk.versions IS NULL OR t.workflow || '@' || t.version = ANY(lk.versions))`
)

// claimFloorSQL reads the lowest claimable task of a queue in claim
// order, without a floor and without locking. Arguments: queue, worker
// id.
const claimFloorSQL = `
SELECT t.priority, t.available_at FROM (SELECT p.name, (p.w).handles, (p.w).versions
		FROM (SELECT ?::text AS name, (SELECT w FROM ?schema.workers w WHERE w.id = ?) AS w) p) q
	CROSS JOIN LATERAL (SELECT t.priority, t.available_at, t.id FROM ?schema.tasks t WHERE ` + claimable + `
		ORDER BY t.priority, t.available_at, t.id LIMIT 1) t`

// claimUpdate moves the rows of cand to running. Arguments: worker id,
// lease ms.
const claimUpdate = `upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING ` + claimReturning

// claimReturning is what a claim's update returns of each claimed row:
// what its statement and the engine read, not the whole row. Every
// column here is decoded for every task claimed (a wide row cost the
// engine a third of its CPU in a burn-down).
const claimReturning = `t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs`

// claimedColumns is the select list of a claim's result (Claimed) over upd
// and its run r: the fields of Claimed that a claim fills (see
// claimReturning; the others are left zero).
var claimedColumns = `upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(` + idsAt("r.task_ids", "upd.deps") + `)) END AS dep_outputs`

// claimSQL is the unkeyed claim whose literal LIMIT is limit.
func claimSQL(limit int) string {
	return claimStatement(claimCTEs(claimQueues, limit)+`, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
)`, "")
}

// claimStatement completes a claim's CTEs (up to a closed upd) into the
// statement: events, NOTIFY, and the claimed rows with extra columns.
// It leaves the run rows alone: a run whose stored status is 'pending'
// and whose task is 'running' is running (see cairn_runs, migration
// 019), and the task's next transition writes the run row.
func claimStatement(ctes, extra string) string {
	return `
WITH` + ctes + `, ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)` + notifyCTEs("upd") + `
SELECT ` + claimedColumns + extra + `,
	` + notifyForce + ` AS notified
FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id`
}

// flowQuantum is how many tasks at most a key is expected to give a
// claim: a claim of n tasks visits keys until what they are expected to
// give (see flowShare) covers n. Fewer keys per claim mean less work per
// task and fewer keys that concurrent claims compete for; a turn across
// keys is then up to flowQuantum tasks of each.
const flowQuantum = "64"

// flowShare is how many tasks key x.k of queue q is expected to give a
// claim: its limit, at most flowQuantum, and what its ready tasks,
// counted up to flowProbe from the walk's position x.p, x.a, x.i (see
// flowVisit), say (0 when x.k is NULL). Expecting
// flowQuantum of every key, a claim of 640 over 2,000 keys of 5 tasks took
// 10 keys and 50 tasks, and the last tasks of a burn-down, their keys
// nearly empty, came in claims of a few each.
const flowShare = `coalesce(least((SELECT coalesce(f.max_running, f.rate_limit) FROM ?schema.flow_keys f WHERE f.key = x.k), ` + flowQuantum + `,
			(SELECT CASE WHEN count(*) = ` + flowProbe + ` THEN ` + flowQuantum + ` ELSE count(*) END FROM (
				SELECT FROM ?schema.tasks t WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name
				AND t.fair_key = x.k AND (t.priority, t.available_at, t.id) >= (x.p, x.a, x.i)
				AND t.available_at >= q.kf AND t.available_at <= now() LIMIT ` + flowProbe + `) r)::int), 0)`

// flowProbe is how many of a key's ready tasks the walk counts: a key
// with that many is expected to give flowQuantum, one with fewer what it
// has. (Counted up to flowQuantum, the count cost 12% of the keyed
// burn-down over 100 keys of many tasks; up to 16, about 2%. A key of 16
// to 63 tasks is still expected to give flowQuantum.)
const flowProbe = "16"

// flowVisit is the key walk's next key of queue q.name after the key
// expression after, as k, with the key's first ready entry in claim
// order (p, a, i: priority, available_at, id), and whether the walk took
// the key (took): a walk takes each key it visits with a
// transaction-scoped advisory lock, and skips one that another claim in
// flight has taken. Claims that start from the same turn at once then
// spread over different keys; without it all but the first would visit
// the same keys, find each key's row locked (SKIP LOCKED) and come back
// nearly empty. The step is one index scan of LIMIT 1 (a subquery with a
// LIMIT is never pulled up, so the key is read once and the lock tried
// once per key); LEFT JOIN keeps its row when no key is left (k NULL
// ends the walk).
//
// The count of the key's tasks (flowShare) and the key's read (kc) start
// at p, a, i: a key's first entries in claim order are mostly those its
// last turn claimed, dead but in a busy queue not yet removable, so each
// is a heap visit, and they were visited three times (the walk, the
// count, the read). Every ready task of the key the statement can see
// is at or after the entry the walk found. Over a keyed burn-down of 100
// keys (cmd/bench -scenario keyed -n 100000), the keyed claim's
// execution fell by 15% (the median of 7 alternated pairs).
func flowVisit(after string) string {
	return `SELECT y.k, y.p, y.a, y.i, y.k IS NOT NULL AND pg_try_advisory_xact_lock(` + flowLockClass + `, hashtext(y.k)) AS took
		FROM (SELECT 1) o LEFT JOIN LATERAL (` + nextReadyKey + ` > ` + after + `
			ORDER BY t.fair_key, t.priority, t.available_at, t.id LIMIT 1) y ON true`
}

// flowTaken is what key x.k counts in the walk: its share (see
// flowShare) if the walk took it, else nothing.
const flowTaken = `CASE WHEN x.took THEN ` + flowShare + ` ELSE 0 END`

// flowLockClass is the first key of the walk's advisory locks (see
// flowVisit): "cair" in ASCII.
const flowLockClass = "1667328370"

// nextReadyKey is the first ready entry of queue q.name from the queue's
// keyed floor q.kf on (see ClaimParams.KeyedFloors), as k (its key), p,
// a, i, whose key compares (the caller completes the comparison and
// orders the scan) with a bound. The floor is a condition on the index
// entry: entries below it are passed over without a heap visit.
const nextReadyKey = `SELECT t.fair_key AS k, t.priority AS p, t.available_at AS a, t.id AS i FROM ?schema.tasks t
				WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf AND t.fair_key`

// keyedClaimCTEs are claimCTEs for a worker that may claim keyed tasks:
// q, cand and upd as there, cand made of unkeyed rows (as claimCTEs) and
// keyed ones within their keys' room, and three more writes: the keys'
// claims counters (rs_claims), the rate keys' new starts (rs_starts) and
// the held-back tasks of rate keys without room, whose available_at
// moves to when a start leaves the window (held). Arguments: queues,
// limits, floor priorities and times (see ClaimParams.floorArgs), keyed
// floors (see ClaimParams.keyedFloorArgs), worker id (handles), cursors
// (per queue, the key after which its turn starts), worker id, lease ms.
//
// finishing makes them the claim of a statement whose CTE fin finishes a
// worker's tasks first (finishKeyedClaimSQL): the statement's snapshot
// still shows those tasks running (or deferred), so a key's room leaves
// them out of its counts; a claim in the finish's transaction, after it,
// sees them finished.
func keyedClaimCTEs(finishing bool) string {
	notFinished := ""
	if finishing {
		notFinished = " AND t.id NOT IN (SELECT id FROM fin)"
	}
	return `
q AS (
	SELECT q.name, q.n, q.i, ` + claimFloorColumns + `,
		` + floorTime("q.kfa") + ` AS kf, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) WITH ORDINALITY AS q(name, n, fp, fa, kfa, i)
	LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), qa AS (
	SELECT q.*, coalesce(a.after, '') AS after FROM q LEFT JOIN unnest((SELECT ?::text[])) WITH ORDINALITY AS a(after, i) ON a.i = q.i
), c0 AS (
	-- Unkeyed: as claimCTEs, ranked as one more key.
	SELECT q.name AS queue, c.ctid, c.priority, c.available_at, c.id,
		row_number() OVER (PARTITION BY q.name ORDER BY c.priority, c.available_at, c.id) AS rr
	FROM q CROSS JOIN LATERAL (` + claimScan + `) c
), ks AS (
	-- Per queue, the rows of the keys with ready tasks that the claim
	-- visits, locked (a key another claim holds is skipped) on their
	-- latest version: in key order from the queue's cursor, wrapping
	-- around, until what they are expected to give covers n (see
	-- flowShare). The keys come from a skip scan of tasks_claim_keyed:
	-- one index descent per key, however many tasks it has.
	SELECT q.name AS queue, q.n, q.kf, q.handles, q.versions, l.* FROM qa q CROSS JOIN LATERAL (
		SELECT k.ord, k.p AS sp, k.a AS sa, k.i AS si, f.key, f.max_running, f.claims, f.rate_limit, f.rate_per_ms, f.starts
		FROM (
			-- cum: the tasks the keys so far are expected to give (each
			-- its limit, at most flowQuantum and at most its ready
			-- tasks); the scan stops once they cover the n asked.
			WITH RECURSIVE s1(key, p, a, i, ord, cum, took) AS (
				SELECT x.k, x.p, x.a, x.i, 1, ` + flowTaken + `, x.took FROM (` + flowVisit("q.after") + `) x
				UNION ALL
				SELECT x.k, x.p, x.a, x.i, s1.ord + 1, s1.cum + ` + flowTaken + `, x.took FROM s1 CROSS JOIN LATERAL (` + flowVisit("s1.key") + `) x
				WHERE s1.key IS NOT NULL AND s1.cum < q.n AND s1.ord < 2 * q.n
			), s2(key, p, a, i, ord, cum, took) AS (
				-- (The conditions in HAVING: no row, no key visited.)
				SELECT x.k, x.p, x.a, x.i, 2 * q.n + 1, c.cum + ` + flowTaken + `, x.took
				FROM (SELECT coalesce(max(cum), 0) AS cum FROM s1 WHERE key IS NOT NULL
					HAVING q.after <> '' AND coalesce(max(cum), 0) < q.n) c
				CROSS JOIN LATERAL (` + flowVisit("''") + `) x
				UNION ALL
				SELECT x.k, x.p, x.a, x.i, s2.ord + 1, s2.cum + ` + flowTaken + `, x.took FROM s2 CROSS JOIN LATERAL (` + flowVisit("s2.key") + `) x
				WHERE s2.key IS NOT NULL AND s2.key < q.after AND s2.cum < q.n AND s2.ord < 4 * q.n
			)
			SELECT key, p, a, i, ord FROM s1 WHERE key IS NOT NULL AND took
			UNION ALL
			SELECT key, p, a, i, ord FROM s2 WHERE key IS NOT NULL AND key <= q.after AND took
		) k
		-- Each key's row locked on its own (a subquery with a lock is not
		-- flattened into a join): one another claim holds is skipped.
		CROSS JOIN LATERAL (SELECT * FROM ?schema.flow_keys f WHERE f.key = k.key FOR UPDATE SKIP LOCKED) f
	) l
), lk AS (
	-- The room of each key, and how many keys its queue has here.
	SELECT ks.*, count(*) OVER (PARTITION BY ks.queue) AS nkeys,
		CASE WHEN ks.max_running IS NOT NULL
		THEN ks.max_running - (SELECT count(*) FROM ?schema.tasks t WHERE t.conc_key = ks.key AND t.status = 'running'` + notFinished + `)::int
			- (ks.claims - coalesce((SELECT v.claims FROM ?schema.flow_keys v WHERE v.key = ks.key), 0))::int
			-- Places kept for the key's parked tasks that wait to come
			-- back (migration 028): returning tasks go first.
			- (SELECT count(*) FROM ?schema.tasks t WHERE t.conc_key = ks.key AND t.status = 'deferred'
				AND t.resume_wanted_at > now() - interval '5 seconds'` + notFinished + `)::int
		ELSE ks.rate_limit - (SELECT count(*) FROM unnest(ks.starts) s WHERE s > now() - ks.rate_per_ms * interval '1 millisecond')::int END AS room,
		(SELECT min(s) FROM unnest(ks.starts) s WHERE s > now() - ks.rate_per_ms * interval '1 millisecond')
			+ ks.rate_per_ms * interval '1 millisecond' AS frees_at
	FROM ks
), kc AS (
	-- Per key, its first tasks that fit its room and its share of the
	-- batch (not locked yet), from the first entry the walk found.
	SELECT lk.queue, lk.room, c.*, row_number() OVER (PARTITION BY c.fair_key ORDER BY c.priority, c.available_at, c.id) AS rr
	FROM lk CROSS JOIN LATERAL (
		SELECT t.ctid, t.priority, t.available_at, t.id, t.fair_key, t.conc_key, t.rate_key FROM ?schema.tasks t
		WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = lk.queue AND t.fair_key = lk.key
			AND (t.priority, t.available_at, t.id) >= (lk.sp, lk.sa, lk.si)
			AND t.available_at >= lk.kf AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (lk.handles IS NULL OR t.workflow || '.' || t.name = ANY(lk.handles))
			AND ` + servedByLk + `
		ORDER BY t.priority, t.available_at, t.id
		LIMIT least(lk.n, greatest(lk.room, 0), greatest(` + flowQuantum + `, (lk.n + lk.nkeys - 1) / lk.nkeys + 1))
	) c
), lr AS (
	-- Rate keys of tasks limited by both a concurrency and a rate key:
	-- locked here (a key another claim holds is skipped) and read on
	-- their latest version.
	SELECT f.key, f.rate_limit - (SELECT count(*) FROM unnest(f.starts) s WHERE s > now() - f.rate_per_ms * interval '1 millisecond')::int AS room
	FROM ?schema.flow_keys f
	WHERE f.key IN (SELECT rate_key FROM kc WHERE conc_key IS NOT NULL AND rate_key IS NOT NULL) AND f.key NOT IN (SELECT key FROM lk)
	ORDER BY f.key
	FOR UPDATE SKIP LOCKED
), rooms AS (
	SELECT key, room FROM lk UNION ALL SELECT key, room FROM lr
), kok AS (
	-- Keyed candidates within their rate key's room as well, and within
	-- their key's room across the claim's queues: a key's tasks may wait
	-- in several of them, and each queue's walk took the whole room (rr
	-- numbers a key's candidates across queues; the key's row is one,
	-- so each queue's walk found the same room).
	SELECT x.queue, x.ctid, x.priority, x.available_at, x.id, x.rr FROM (
		SELECT kc.*, row_number() OVER (PARTITION BY kc.rate_key ORDER BY kc.priority, kc.available_at, kc.id) AS rn FROM kc
	) x
	WHERE (x.rate_key IS NULL OR x.rn <= (SELECT min(room) FROM rooms WHERE rooms.key = x.rate_key))
		AND x.rr <= x.room
), pick AS (
	-- Per queue, the first n by priority, then turn.
	SELECT y.ctid, y.keyed FROM (
		SELECT x.*, row_number() OVER (PARTITION BY x.queue ORDER BY x.priority, x.rr, x.available_at, x.id) AS pos FROM (
			SELECT queue, ctid, priority, available_at, id, rr, false AS keyed FROM c0
			UNION ALL
			SELECT queue, ctid, priority, available_at, id, rr, true FROM kok
		) x
	) y JOIN q ON q.name = y.queue
	WHERE y.pos <= q.n
), kl AS (
	-- The keyed picks, locked; one taken meanwhile is left out.
	SELECT t.ctid FROM ?schema.tasks t
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM pick WHERE keyed)) AND (t.status = 'ready') IS TRUE
	FOR UPDATE OF t SKIP LOCKED
), cand AS (
	-- (No LIMIT: pick took at most n of each queue. One statement serves
	-- every batch size; with a literal LIMIT per size, as the unkeyed
	-- claim's, each connection planned each size's statement apart, five
	-- custom plans and a generic one, at 4 ms a plan.)
	SELECT ctid FROM pick WHERE NOT keyed
	UNION ALL
	SELECT ctid FROM kl
), held AS (
	-- A rate key without room: its first tasks wait, ready, until a start
	-- leaves the window.
	UPDATE ?schema.tasks t SET available_at = h.frees_at, updated_at = now()
	FROM (
		SELECT c.ctid, lk.frees_at FROM lk
		CROSS JOIN LATERAL (
			SELECT t.ctid FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = lk.queue AND t.fair_key = lk.key
				AND t.available_at >= lk.kf AND t.available_at < lk.frees_at
			ORDER BY t.priority, t.available_at, t.id
			LIMIT lk.n
			FOR UPDATE OF t SKIP LOCKED
		) c
		WHERE lk.room <= 0 AND lk.frees_at IS NOT NULL AND lk.rate_limit IS NOT NULL
	) h
	WHERE t.ctid = h.ctid AND (t.status = 'ready') IS TRUE
), ` + claimUpdate + `, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), rs_claims AS (
	-- Each claim of a concurrency key counts on its row (see above).
	UPDATE ?schema.flow_keys f SET claims = f.claims + a.n
	FROM (SELECT conc_key, count(*)::int AS n FROM upd WHERE conc_key IS NOT NULL GROUP BY conc_key) a
	WHERE f.key = a.conc_key
), rs_starts AS (
	-- Each start counts against its rate key's window.
	UPDATE ?schema.flow_keys f SET updated_at = now(), starts = ARRAY(
		SELECT s FROM unnest(f.starts) s WHERE s > now() - 2 * f.rate_per_ms * interval '1 millisecond'
		UNION ALL
		SELECT now() FROM generate_series(1, a.n)
		ORDER BY 1)
	FROM (SELECT rate_key, count(*)::int AS n FROM upd WHERE rate_key IS NOT NULL GROUP BY rate_key) a
	WHERE f.key = a.rate_key
), turn AS MATERIALIZED (
	-- Per queue, the last key its turn visited: read once, not by a
	-- sort of ks for each claimed row (inlined into after_key's
	-- subquery, it was sorted for each).
	SELECT DISTINCT ON (queue) queue, key FROM ks ORDER BY queue, ord DESC
)`
}

// keyedClaimSQL is claimSQL over keyedClaimCTEs; after_key is the last
// key its queue's turn visited.
func keyedClaimSQL() string {
	return claimStatement(keyedClaimCTEs(false), `,
	`+afterKeyColumn)
}

// afterKeyColumn is the last key the turn of a claimed row's queue
// visited: the queue's next cursor.
const afterKeyColumn = `(SELECT turn.key FROM turn WHERE turn.queue = upd.queue) AS after_key`

// keyedFloorSQL reads the least available_at of the keyed tasks of a
// queue that a worker's keyed claims could take, now or later, from a
// floor on (microseconds since the Unix epoch, 0: none), and now() when
// that is earlier. Arguments: queue, worker id, floor.
//
// tasks_claim_keyed orders a queue's tasks by key, priority, then
// available_at, so the least available_at is that of the first task in
// one of its (key, priority) groups. The groups come from a skip scan
// (one index descent each, as the claim's key walk), and each group's
// first task the worker could take from one more: two descents a group,
// however many tasks wait in it. (Reading every task, a floor read took
// 100 ms over 100,000 ready tasks.)
var keyedFloorSQL = `
WITH RECURSIVE q AS (
	SELECT p.name, (p.w).handles, (p.w).versions, ` + floorTime("p.kfa") + ` AS kf
	FROM (SELECT ?::text AS name, (SELECT w FROM ?schema.workers w WHERE w.id = ?) AS w, ?::bigint AS kfa) p
), g(key, priority) AS (
	SELECT n.fair_key, n.priority FROM q CROSS JOIN LATERAL (
		SELECT t.fair_key, t.priority FROM ?schema.tasks t
		WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf
		ORDER BY t.fair_key, t.priority LIMIT 1) n
	UNION ALL
	SELECT n.fair_key, n.priority FROM g, q CROSS JOIN LATERAL (
		SELECT t.fair_key, t.priority FROM ?schema.tasks t
		WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf
			AND (t.fair_key, t.priority) > (g.key, g.priority)
		ORDER BY t.fair_key, t.priority LIMIT 1) n
)
SELECT least(min(f.available_at), now()) AS at
FROM q LEFT JOIN (g CROSS JOIN LATERAL (
	SELECT t.available_at FROM ?schema.tasks t
	WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.fair_key = g.key AND t.priority = g.priority
		AND t.available_at >= q.kf
		AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
		AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))
		AND ` + servedByQ + `
	ORDER BY t.available_at LIMIT 1) f) ON true`

// finishClaimSQL finishes a worker's batch of tasks that have no
// dependents and claims the next ready tasks, in ONE statement: the
// completion's compare-and-set update (rows in known states, see
// curKnown), the claim (as claimSQL), one event per move, one update per
// run for both (a run may have a task finishing and another starting in
// the same statement, and a row is updated once per statement), and
// NOTIFY. The finished rows are not read and locked ahead (see
// curKnown): the update checks each on its latest version. With nothing
// to release, nothing else has to run in its transaction, so it commits
// on its own: one round trip instead of four (BEGIN, finish, claim,
// COMMIT).
//
// Arguments: items (jsonb), worker id (compare-and-set), worker id
// (held_by), then claimCTEs' (queues, limits, worker id, worker id, lease
// ms), then events, ready and control channels, whether to announce taken
// tasks (false). limit is the claim's literal LIMIT (see TaskClaim).
//
// park makes it the statement of a worker's batch of parks (running ->
// deferred, see TaskParkAndClaimOne). A park releases nothing, so a task
// with dependents parks too. The claim takes no more tasks of a queue
// than the statement parked of it (parkClaimQueues): a park that finds
// its row gone (cancelled, rescued) leaves its slot with its handler until
// that returns, so claiming for it would run more tasks than slots.
func finishClaimSQL(limit int, park bool) string {
	leaf, queues := "cardinality(t.dependents) = 0", claimQueues
	if park {
		leaf, queues = "v.to_status = 'deferred'", parkClaimQueues
	}
	return finishThenClaimSQL(leaf, claimCTEs(queues, limit)+"\n)", "", false)
}

// finishKeyedClaimSQL is finishClaimSQL (not parking) for a worker that
// may claim keyed tasks: the claim is keyedClaimCTEs', its keys' room
// counted without the tasks the statement finishes, and each claimed row
// has the after_key of keyedClaimSQL. A keyed task that leaves running
// wakes its queue, as a transition does (its key has room again).
//
// Arguments: items, worker id, worker id, then keyedClaimCTEs' (queues,
// limits, floor priorities and times, keyed floors, worker id, cursors,
// worker id, lease ms), then the channels and false, as finishClaimSQL.
func finishKeyedClaimSQL() string {
	return finishThenClaimSQL("cardinality(t.dependents) = 0", keyedClaimCTEs(true), ",\n\t\t"+afterKeyColumn, true)
}

// finishThenClaimSQL is the statement of finishClaimSQL and
// finishKeyedClaimSQL: fin, which moves the items whose rows meet leaf,
// then claim (CTEs up to a closed upd), the events and run updates of
// both, NOTIFY, and a row per claimed task with claimedColumns and extra.
// wakeFreed also announces the queues of keyed tasks fin took out of
// running (notifyCTEsWaking).
func finishThenClaimSQL(leaf, claim, extra string, wakeFreed bool) string {
	// frees: fin's column, and mv's from fin and from the claim.
	frees, finFrees, claimFrees, notify := "", "", "", notifyCTEs("mv")
	if wakeFreed {
		frees, finFrees, claimFrees = ",\n\t\t"+freesKeyedPlace("v.from_status")+" AS frees", ", frees", ", false"
		notify = notifyCTEsWaking("mv", "frees")
	}
	return `
WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS ` + transitionItems + `
), fin AS (
	UPDATE ?schema.tasks t SET` + transitionSet("v.from_status") + `
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND ` + leaf + `
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail` + frees + `
), ` + claim + `, mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail` + finFrees + ` FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL` + claimFrees + ` FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), ` + runUpdateCTEs("fin") + notify + `
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, ` + notifyForce + ` + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT ` + claimedColumns + extra + `,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord`
}

// parkClaimQueues is claimQueues with each queue's n bounded by the
// parks of fin in it. Arguments: as claimQueues.
var parkClaimQueues = `
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, ` + claimFloorColumns + `, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)`
