-- Rendered by sqlgen_test.go: go test ./store -run TestSQLFiles -update
-- (TestSQLFiles fails while this file differs from what it renders).
-- ?schema is the store's schema, each ? an argument ($1, $2... in order).
-- A worker's finished leaf tasks and its next claim of keyed and unkeyed
-- tasks in one statement (TaskFinishAndClaimOne of a keyed claim), one
-- statement for every batch size.

-- name: TaskFinishClaimKeyed

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
		AND cardinality(t.dependents) = 0
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail,
		t.conc_key IS NOT NULL AND v.from_status = 'running' AND t.status <> 'running' AS frees
), 
q AS (
	SELECT q.name, q.n, q.i, q.fp::int AS fp,
		CASE WHEN q.fa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.fa * interval '1 microsecond' END AS fa,
		CASE WHEN q.kfa = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + q.kfa * interval '1 microsecond' END AS kf, w.handles, w.versions
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) WITH ORDINALITY AS q(name, n, fp, fa, kfa, i)
	LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), qa AS (
	SELECT q.*, coalesce(a.after, '') AS after FROM q LEFT JOIN unnest((SELECT ?::text[])) WITH ORDINALITY AS a(after, i) ON a.i = q.i
), c0 AS (
	-- Unkeyed: as claimCTEs, ranked as one more key.
	SELECT q.name AS queue, c.ctid, c.priority, c.available_at, c.id,
		row_number() OVER (PARTITION BY q.name ORDER BY c.priority, c.available_at, c.id) AS rr
	FROM q CROSS JOIN LATERAL (
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
				SELECT x.k, x.p, x.a, x.i, 1, CASE WHEN x.took THEN coalesce(least((SELECT coalesce(f.max_running, f.rate_limit) FROM ?schema.flow_keys f WHERE f.key = x.k), 64,
			(SELECT CASE WHEN count(*) = 16 THEN 64 ELSE count(*) END FROM (
				SELECT FROM ?schema.tasks t WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name
				AND t.fair_key = x.k AND (t.priority, t.available_at, t.id) >= (x.p, x.a, x.i)
				AND t.available_at >= q.kf AND t.available_at <= now() LIMIT 16) r)::int), 0) ELSE 0 END, x.took FROM (SELECT y.k, y.p, y.a, y.i, y.k IS NOT NULL AND pg_try_advisory_xact_lock(1667328370, hashtext(y.k)) AS took
		FROM (SELECT 1) o LEFT JOIN LATERAL (SELECT t.fair_key AS k, t.priority AS p, t.available_at AS a, t.id AS i FROM ?schema.tasks t
				WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf AND t.fair_key > q.after
			ORDER BY t.fair_key, t.priority, t.available_at, t.id LIMIT 1) y ON true) x
				UNION ALL
				SELECT x.k, x.p, x.a, x.i, s1.ord + 1, s1.cum + CASE WHEN x.took THEN coalesce(least((SELECT coalesce(f.max_running, f.rate_limit) FROM ?schema.flow_keys f WHERE f.key = x.k), 64,
			(SELECT CASE WHEN count(*) = 16 THEN 64 ELSE count(*) END FROM (
				SELECT FROM ?schema.tasks t WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name
				AND t.fair_key = x.k AND (t.priority, t.available_at, t.id) >= (x.p, x.a, x.i)
				AND t.available_at >= q.kf AND t.available_at <= now() LIMIT 16) r)::int), 0) ELSE 0 END, x.took FROM s1 CROSS JOIN LATERAL (SELECT y.k, y.p, y.a, y.i, y.k IS NOT NULL AND pg_try_advisory_xact_lock(1667328370, hashtext(y.k)) AS took
		FROM (SELECT 1) o LEFT JOIN LATERAL (SELECT t.fair_key AS k, t.priority AS p, t.available_at AS a, t.id AS i FROM ?schema.tasks t
				WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf AND t.fair_key > s1.key
			ORDER BY t.fair_key, t.priority, t.available_at, t.id LIMIT 1) y ON true) x
				WHERE s1.key IS NOT NULL AND s1.cum < q.n AND s1.ord < 2 * q.n
			), s2(key, p, a, i, ord, cum, took) AS (
				-- (The conditions in HAVING: no row, no key visited.)
				SELECT x.k, x.p, x.a, x.i, 2 * q.n + 1, c.cum + CASE WHEN x.took THEN coalesce(least((SELECT coalesce(f.max_running, f.rate_limit) FROM ?schema.flow_keys f WHERE f.key = x.k), 64,
			(SELECT CASE WHEN count(*) = 16 THEN 64 ELSE count(*) END FROM (
				SELECT FROM ?schema.tasks t WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name
				AND t.fair_key = x.k AND (t.priority, t.available_at, t.id) >= (x.p, x.a, x.i)
				AND t.available_at >= q.kf AND t.available_at <= now() LIMIT 16) r)::int), 0) ELSE 0 END, x.took
				FROM (SELECT coalesce(max(cum), 0) AS cum FROM s1 WHERE key IS NOT NULL
					HAVING q.after <> '' AND coalesce(max(cum), 0) < q.n) c
				CROSS JOIN LATERAL (SELECT y.k, y.p, y.a, y.i, y.k IS NOT NULL AND pg_try_advisory_xact_lock(1667328370, hashtext(y.k)) AS took
		FROM (SELECT 1) o LEFT JOIN LATERAL (SELECT t.fair_key AS k, t.priority AS p, t.available_at AS a, t.id AS i FROM ?schema.tasks t
				WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf AND t.fair_key > ''
			ORDER BY t.fair_key, t.priority, t.available_at, t.id LIMIT 1) y ON true) x
				UNION ALL
				SELECT x.k, x.p, x.a, x.i, s2.ord + 1, s2.cum + CASE WHEN x.took THEN coalesce(least((SELECT coalesce(f.max_running, f.rate_limit) FROM ?schema.flow_keys f WHERE f.key = x.k), 64,
			(SELECT CASE WHEN count(*) = 16 THEN 64 ELSE count(*) END FROM (
				SELECT FROM ?schema.tasks t WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name
				AND t.fair_key = x.k AND (t.priority, t.available_at, t.id) >= (x.p, x.a, x.i)
				AND t.available_at >= q.kf AND t.available_at <= now() LIMIT 16) r)::int), 0) ELSE 0 END, x.took FROM s2 CROSS JOIN LATERAL (SELECT y.k, y.p, y.a, y.i, y.k IS NOT NULL AND pg_try_advisory_xact_lock(1667328370, hashtext(y.k)) AS took
		FROM (SELECT 1) o LEFT JOIN LATERAL (SELECT t.fair_key AS k, t.priority AS p, t.available_at AS a, t.id AS i FROM ?schema.tasks t
				WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf AND t.fair_key > s2.key
			ORDER BY t.fair_key, t.priority, t.available_at, t.id LIMIT 1) y ON true) x
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
		THEN ks.max_running - (SELECT count(*) FROM ?schema.tasks t WHERE t.conc_key = ks.key AND t.status = 'running' AND t.id NOT IN (SELECT id FROM fin))::int
			- (ks.claims - coalesce((SELECT v.claims FROM ?schema.flow_keys v WHERE v.key = ks.key), 0))::int
			-- Places kept for the key's parked tasks that wait to come
			-- back (migration 028): returning tasks go first.
			- (SELECT count(*) FROM ?schema.tasks t WHERE t.conc_key = ks.key AND t.status = 'deferred'
				AND t.resume_wanted_at > now() - interval '5 seconds' AND t.id NOT IN (SELECT id FROM fin))::int
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
			AND (t.version IS NULL OR lk.versions IS NULL OR t.workflow || '@' || t.version = ANY(lk.versions))
		ORDER BY t.priority, t.available_at, t.id
		LIMIT least(lk.n, greatest(lk.room, 0), greatest(64, (lk.n + lk.nkeys - 1) / lk.nkeys + 1))
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
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail, frees FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL, false FROM upd
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
	SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM mv WHERE to_status = 'ready' OR frees) x
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
		(SELECT turn.key FROM turn WHERE turn.queue = upd.queue) AS after_key,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord

