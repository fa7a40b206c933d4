-- The SQL API: functions of the engine's schema that any language calls
-- inside its own transaction (README, "Cairn from other languages").
--
-- * enqueue(workflow, input, ...) RETURNS bigint: a run of the latest
--   stored version of workflow (workflow_versions), with the checks,
--   idempotency key, uniqueness window, flow keys, debounce or singleton
--   and NOTIFY of Engine.Enqueue; the run exists when, and only if, the
--   caller's transaction commits.
-- * send_signal(task_id, name, payload) RETURNS bigint: Engine.SendSignal.
-- * cancel_run(run_id) RETURNS int: Engine.CancelRun.
--
-- Below them are the engine's own statements, which the Go engine calls
-- too, so that each rule is written once: run_insert (the insert of
-- store.RunInsertMany), run_debounce (the enqueue of a debounced or
-- singleton run), task_transition (the compare-and-set transition of
-- tasks that checks no holder: admin actions, releases) and cancel_tree
-- (a cancel and its cascade into child runs) and signal_insert (a
-- signal stored and announced). The public functions check their input
-- against the engine's default limits; the engine checks its own (Config). The queries of
-- run_insert_once and task_transition are what the store's statement
-- templates render (store's TestSQLFunctions fails when they differ: a
-- change of a template needs a migration that replaces the function).
--
-- Errors are raised with a message naming what was wrong and a SQLSTATE:
-- 22023 (invalid_parameter_value) for bad input, 54000
-- (program_limit_exceeded) for input over the limit, P0002
-- (no_data_found) for an unknown workflow, run or task, 55000
-- (object_not_in_prerequisite_state) for a run or task that has finished.
--
-- Every function runs with the search_path it was created with (the
-- engine's schema), so a caller needs none.
--
-- pending_settles: the runs that a cancel_run from SQL finished and that
-- other runs wait for (WithAfter). Those runs' root tasks are decided by
-- their trigger rules, which the engine evaluates (store/rule): every
-- engine's upkeep takes the rows (store.PendingSettleTake) and decides
-- them; until then those roots stay not_started, as they are.
CREATE TABLE pending_settles (
    id         bigserial   PRIMARY KEY,
    unblocked  bigint[]    NOT NULL DEFAULT '{}', -- tasks whose dependencies are all done
    settle     bigint[]    NOT NULL DEFAULT '{}', -- finished runs others wait for
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One try of the run insert: the runs of p_runs (store's runInsertRow as
-- JSON) with their tasks from p_templates (taskInsertRow), announcing the
-- queues of the ready tasks when p_wake. A run whose key was taken by a
-- run this statement could not see comes back with id 0 (run_insert
-- tries it again).
CREATE FUNCTION run_insert_once(p_runs jsonb, p_templates jsonb, p_wake boolean)
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
	SELECT pg_notify(current_schema() || '_control', json_build_object('k', 'taken', 't', json_agg(id))::text)
	FROM (SELECT id, (row_number() OVER () - 1) / 300 AS grp FROM upd
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

-- The run insert (store.RunInsertMany): each run of p_runs inserted, or
-- the run holding its idempotency key returned (existing), in the order
-- of p_runs' ord. A key that changes hands between tries five times
-- over is an error.
CREATE FUNCTION run_insert(p_runs jsonb, p_templates jsonb, p_wake boolean)
RETURNS TABLE (ord int, id bigint, existing boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
DECLARE
    pending jsonb := p_runs;
    retry   int[];
    r       record;
BEGIN
    FOR try IN 1..5 LOOP
        retry := '{}';
        FOR r IN SELECT * FROM run_insert_once(pending, p_templates, p_wake) LOOP
            IF r.id = 0 THEN
                retry := retry || r.ord;
            ELSE
                ord := r.ord; id := r.id; existing := r.existing;
                RETURN NEXT;
            END IF;
        END LOOP;
        IF cardinality(retry) = 0 THEN
            RETURN;
        END IF;
        pending := (SELECT jsonb_agg(e) FROM jsonb_array_elements(pending) e WHERE (e->>'ord')::int = ANY(retry));
    END LOOP;
    RAISE EXCEPTION 'insert runs: idempotency key kept changing hands';
END
$fn$;

-- The enqueue of one debounced or singleton run (store.Debounce): p_run
-- and p_templates as run_insert takes them. The enqueues of a key take
-- turns on an advisory lock held until commit; the newest run of the
-- key, while none of its tasks was ever claimed, has its input replaced
-- (and, for a debounce, its start moved to least(now + wait, its first
-- enqueue + max wait)) and is returned as existing; else the run is
-- inserted and marked with the key. Times are by the database clock once
-- the key's turn came.
CREATE FUNCTION run_debounce(p_run jsonb, p_templates jsonb, p_key text, p_wait_us bigint, p_max_wait_us bigint,
    p_singleton boolean, p_wake boolean)
RETURNS TABLE (id bigint, existing boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
DECLARE
    holder bigint;
    queued boolean;
    ins    record;
    now_at timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(1684366958, hashtext(p_key)); -- 1684366958: "debn"
    -- The clock once the key's turn came (the statement began before the
    -- wait for the lock).
    now_at := clock_timestamp();
    SELECT r.id INTO holder FROM run_rows r WHERE r.debounce_key = p_key ORDER BY r.id DESC LIMIT 1;
    IF holder IS NOT NULL THEN
        -- The tasks locked, as a claim or a transition locks them: a claim
        -- that took one first is seen; a claim after this commit sees the
        -- new start.
        SELECT count(*) > 0 AND coalesce(bool_and(t.attempt = 0 AND t.status IN ('ready', 'not_started')), false) INTO queued
        FROM (SELECT t.status, t.attempt FROM tasks t
              WHERE t.id = ANY((SELECT r.task_ids FROM run_rows r WHERE r.id = holder)::bigint[]) ORDER BY t.id FOR UPDATE) t;
        IF queued THEN
            UPDATE run_rows r SET input = p_run->'input',
                debounce_at = CASE WHEN p_singleton THEN r.debounce_at
                    ELSE least(now_at + p_wait_us * interval '1 microsecond', r.debounce_until) END
            WHERE r.id = holder;
            IF NOT p_singleton THEN
                UPDATE tasks t SET available_at = r.debounce_at
                FROM run_rows r WHERE r.id = holder AND t.id = ANY(r.task_ids) AND t.status = 'ready';
            END IF;
            id := holder; existing := true;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    SELECT i.id, i.existing INTO ins FROM run_insert(jsonb_build_array(p_run), p_templates, p_wake) i;
    id := ins.id; existing := ins.existing;
    IF NOT ins.existing THEN -- else its idempotency key was held: that run, unchanged
        UPDATE run_rows r SET debounce_key = p_key,
            debounce_at = CASE WHEN p_singleton THEN NULL
                ELSE least(now_at + p_wait_us * interval '1 microsecond', now_at + p_max_wait_us * interval '1 microsecond') END,
            debounce_until = CASE WHEN p_singleton THEN NULL ELSE now_at + p_max_wait_us * interval '1 microsecond' END
        WHERE r.id = ins.id;
        IF NOT p_singleton THEN
            UPDATE tasks t SET available_at = r.debounce_at
            FROM run_rows r WHERE r.id = ins.id AND t.id = ANY(r.task_ids) AND t.status = 'ready';
        END IF;
    END IF;
    RETURN NEXT;
END
$fn$;

-- The compare-and-set transition of the tasks of p_items (store's
-- TransitionItem as JSON) from one of the states p_from, by no worker
-- (admin actions, releases; store.Transition): each task's event, its
-- run's counters and status, its dependents counted down (the default
-- rule decided here; the ids whose rule the engine decides in
-- unblocked), NOTIFY. The arrays come on the first row.
CREATE FUNCTION task_transition(p_items jsonb, p_from text[])
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
	started_at = coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END),
	finished_at = CASE WHEN r.done_tasks + d.done = r.task_count THEN coalesce(r.finished_at, greatest(now(), coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END))) END,
	updated_at = greatest(now(), coalesce(r.started_at, CASE WHEN d.started THEN coalesce(CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM tasks f WHERE f.id = ANY(r.task_ids)) END, now()) END))
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
	SELECT pg_notify(current_schema() || '_control', json_build_object('k', 'taken', 't', json_agg(id))::text)
	FROM (SELECT id, (row_number() OVER () - 1) / 300 AS grp FROM mv
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

-- Cancels the tasks p_tasks that have not finished (event detail
-- p_detail) and, level after level, the unfinished tasks of the child
-- runs of the tasks it cancelled (p_child_detail): the rows of
-- task_transition, each level's arrays on its first row.
CREATE FUNCTION cancel_tree(p_tasks bigint[], p_detail jsonb, p_child_detail jsonb)
RETURNS TABLE (id bigint, run_id bigint, queue text, from_status text, to_status text, attempt int, held_by bigint,
    unblocked bigint[], promoted bigint[], settle bigint[], first boolean, notified bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
DECLARE
    level  bigint[] := p_tasks;
    detail jsonb := p_detail;
    moved  bigint[];
    r      record;
BEGIN
    WHILE cardinality(level) > 0 LOOP
        moved := '{}';
        FOR r IN SELECT * FROM task_transition(
            (SELECT jsonb_agg(jsonb_build_object('id', i, 'to_status', 'cancelled', 'detail', detail) ORDER BY i) FROM unnest(level) i),
            '{not_started,ready,running,deferred,interrupted}')
        LOOP
            id := r.id; run_id := r.run_id; queue := r.queue; from_status := r.from_status; to_status := r.to_status;
            attempt := r.attempt; held_by := r.held_by; unblocked := r.unblocked; promoted := r.promoted; settle := r.settle;
            first := r.first; notified := r.notified;
            moved := moved || r.id;
            RETURN NEXT;
        END LOOP;
        level := ARRAY(SELECT t.id FROM run_rows c JOIN tasks t ON t.id = ANY(c.task_ids)
            WHERE c.parent_task_id = ANY(moved) AND c.status NOT IN ('completed', 'failed', 'cancelled')
                AND t.status IN ('not_started', 'ready', 'running', 'deferred', 'interrupted')
            ORDER BY t.id);
        detail := p_child_detail;
    END LOOP;
END
$fn$;

-- cancel_run: Engine.CancelRun from SQL. Every unfinished task of the run
-- and of its child runs is cancelled (a running handler's context is
-- cancelled by the NOTIFY its engine gets at commit); it returns how many
-- of the run's own tasks it cancelled. An unknown run raises P0002, a
-- finished one 55000. The runs waiting for it (WithAfter) are decided by
-- an engine (pending_settles).
CREATE FUNCTION cancel_run(run_id bigint) RETURNS int
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
DECLARE
    status    text;
    n         int := 0;
    unblocked bigint[] := '{}';
    settle    bigint[] := '{}';
    r         record;
BEGIN
    SELECT v.status INTO status FROM runs v WHERE v.id = cancel_run.run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cancel_run: run % not found', cancel_run.run_id USING ERRCODE = 'P0002';
    END IF;
    FOR r IN SELECT * FROM cancel_tree(
        ARRAY(SELECT t.id FROM run_rows x JOIN tasks t ON t.id = ANY(x.task_ids)
              WHERE x.id = cancel_run.run_id AND t.status IN ('not_started', 'ready', 'running', 'deferred', 'interrupted') ORDER BY t.id),
        jsonb_build_object('reason', 'run cancelled', 'actor', jsonb_build_object('name', session_user, 'role', 'sql')),
        jsonb_build_object('reason', 'parent cancelled', 'actor', jsonb_build_object('name', session_user, 'role', 'sql')))
    LOOP
        IF r.run_id = cancel_run.run_id THEN
            n := n + 1;
        END IF;
        unblocked := unblocked || coalesce(r.unblocked, '{}');
        settle := settle || coalesce(r.settle, '{}');
    END LOOP;
    IF cardinality(unblocked) > 0 OR cardinality(settle) > 0 THEN
        INSERT INTO pending_settles (unblocked, settle) VALUES (unblocked, settle);
    END IF;
    IF n = 0 AND status IN ('completed', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'cancel_run: run % is %; only an unfinished run can be cancelled', cancel_run.run_id, status
            USING ERRCODE = '55000';
    END IF;
    RETURN n;
END
$fn$;

-- The signal name with payload for a task that has not finished, woken
-- by a control NOTIFY at commit (store.SignalSend); one sent before the
-- task waits is kept. Returns the signal's row. An unknown task raises
-- P0002, a finished one 55000.
CREATE FUNCTION signal_insert(p_task bigint, p_name text, p_payload jsonb) RETURNS task_signals
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
    st  text;
    sig task_signals;
BEGIN
    SELECT t.status INTO st FROM tasks t WHERE t.id = p_task;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'send_signal: task % not found', p_task USING ERRCODE = 'P0002';
    END IF;
    IF st IN ('completed', 'failed', 'skipped', 'cancelled') THEN
        RAISE EXCEPTION 'send_signal: task % is %; only an unfinished task can be signalled', p_task, st
            USING ERRCODE = '55000';
    END IF;
    INSERT INTO task_signals (task_id, name, payload) VALUES (p_task, p_name, p_payload) RETURNING * INTO sig;
    PERFORM pg_notify(current_schema() || '_control', json_build_object('k', 'signal', 't', json_build_array(p_task))::text);
    RETURN sig;
END
$fn$;

-- send_signal: Engine.SendSignal from SQL (signal_insert, after the
-- checks of the engine's defaults: name 1 to 200 bytes, payload at most
-- 1 MiB as text). Returns the signal's id.
CREATE FUNCTION send_signal(task_id bigint, name text, payload jsonb DEFAULT 'null') RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
BEGIN
    IF name IS NULL OR name = '' THEN
        RAISE EXCEPTION 'send_signal: signal name is empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(name) > 200 THEN
        RAISE EXCEPTION 'send_signal: signal name is % bytes long, limit 200', octet_length(name) USING ERRCODE = '22023';
    END IF;
    IF octet_length(coalesce(payload, 'null')::text) > 1048576 THEN
        RAISE EXCEPTION 'send_signal: signal payload: % bytes, limit 1048576', octet_length(payload::text) USING ERRCODE = '54000';
    END IF;
    RETURN (signal_insert(task_id, name, coalesce(payload, 'null'))).id;
END
$fn$;

-- enqueue: Engine.Enqueue from SQL, for a workflow any engine registered
-- (its latest stored version). Named arguments after input, for example
-- enqueue('ingest', '{"url": "..."}', key => 'ingest:42'). Returns the
-- run's id: a new run, or the run that holds key (live, or within the
-- unique_for window), debounce_key or singleton_key.
CREATE FUNCTION enqueue(
    workflow          text,
    input             jsonb       DEFAULT '{}',
    key               text        DEFAULT NULL,
    run_at            timestamptz DEFAULT NULL,
    queue             text        DEFAULT NULL,
    priority          int         DEFAULT NULL,
    unique_for        interval    DEFAULT NULL,
    debounce_key      text        DEFAULT NULL,
    debounce_wait     interval    DEFAULT NULL,
    debounce_max_wait interval    DEFAULT NULL,
    singleton_key     text        DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
#variable_conflict use_column
DECLARE
    wf        text := enqueue.workflow;
    doc       jsonb := coalesce(enqueue.input, '{}');
    v         record;
    q         text;
    tpl       jsonb;
    run       jsonb;
    dkey      text := coalesce(enqueue.debounce_key, enqueue.singleton_key);
    field     text := CASE WHEN enqueue.singleton_key IS NOT NULL THEN 'singleton' ELSE 'debounce' END;
    bad       text;
    wait_us   bigint;
    max_us    bigint;
    out_id    bigint;
BEGIN
    IF wf IS NULL OR wf = '' THEN
        RAISE EXCEPTION 'enqueue: workflow is required' USING ERRCODE = '22023';
    END IF;
    SELECT w.version, w.definition, w.templates INTO v FROM workflow_versions w
    WHERE w.workflow = wf ORDER BY w.seen_at DESC, w.registered_at DESC, w.version DESC LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'enqueue: unknown workflow "%"; known workflows: %', wf,
            coalesce((SELECT string_agg(k.workflow, ', ') FROM (SELECT DISTINCT w.workflow FROM workflow_versions w ORDER BY 1 LIMIT 20) k), 'none')
            USING ERRCODE = 'P0002';
    END IF;
    IF jsonb_typeof(doc) <> 'object' THEN
        RAISE EXCEPTION 'enqueue: workflow "%": input must be a JSON object, not %', wf, jsonb_typeof(doc) USING ERRCODE = '22023';
    END IF;
    IF octet_length(doc::text) > 1048576 THEN
        RAISE EXCEPTION 'enqueue: workflow "%": input is % bytes, limit 1048576', wf, octet_length(doc::text) USING ERRCODE = '54000';
    END IF;
    -- A limited task's key value must be in the input (define's checkFlowKeys).
    SELECT format('task "%s": no value at "%s" for its %s key', t->>'name', array_to_string(p.path, '.'), p.kind) INTO bad
    FROM jsonb_array_elements(v.templates) t
    CROSS JOIN LATERAL (VALUES ('concurrency', t->'concurrency'->'Path'), ('rate limit', t->'rate_limit_def'->'Path')) f(kind, path_json)
    CROSS JOIN LATERAL (SELECT f.kind, ARRAY(SELECT jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(f.path_json) = 'array' THEN f.path_json ELSE '[]' END)) AS path) p
    WHERE cardinality(p.path) > 0 AND coalesce(doc #> p.path, 'null') = 'null'
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'enqueue: workflow "%": input: %', wf, bad USING ERRCODE = '22023';
    END IF;
    IF enqueue.queue IS NOT NULL AND enqueue.queue !~ '^[A-Za-z0-9_.:-]{1,64}$' THEN
        RAISE EXCEPTION 'enqueue: queue "%": must be 1-64 of A-Z a-z 0-9 _ . : -', enqueue.queue USING ERRCODE = '22023';
    END IF;
    IF enqueue.key IS NOT NULL AND (enqueue.key = '' OR octet_length(enqueue.key) > 512) THEN
        RAISE EXCEPTION 'enqueue: key: idempotency key must be 1-512 bytes' USING ERRCODE = '22023';
    END IF;
    IF enqueue.unique_for IS NOT NULL AND enqueue.unique_for <= interval '0' THEN
        RAISE EXCEPTION 'enqueue: unique_for: window % must be positive', enqueue.unique_for USING ERRCODE = '22023';
    END IF;
    IF enqueue.unique_for IS NOT NULL AND enqueue.key IS NULL THEN
        RAISE EXCEPTION 'enqueue: unique_for: needs a key: the window keeps a key held' USING ERRCODE = '22023';
    END IF;
    IF enqueue.run_at IS NOT NULL AND NOT (enqueue.run_at >= '0001-01-01 00:00:00Z' AND enqueue.run_at < '10000-01-01 00:00:00Z') THEN
        RAISE EXCEPTION 'enqueue: run_at: % is outside years 1 to 9999', enqueue.run_at USING ERRCODE = '22023';
    END IF;
    IF enqueue.debounce_key IS NOT NULL AND enqueue.singleton_key IS NOT NULL THEN
        RAISE EXCEPTION 'enqueue: debounce_key and singleton_key: give one of them' USING ERRCODE = '22023';
    END IF;
    IF enqueue.debounce_key IS NULL AND (enqueue.debounce_wait IS NOT NULL OR enqueue.debounce_max_wait IS NOT NULL) THEN
        RAISE EXCEPTION 'enqueue: debounce_wait and debounce_max_wait need a debounce_key' USING ERRCODE = '22023';
    END IF;
    IF dkey IS NOT NULL THEN
        IF dkey = '' OR octet_length(dkey) > 512 THEN
            RAISE EXCEPTION 'enqueue: %: key must be 1-512 bytes', field USING ERRCODE = '22023';
        END IF;
        IF enqueue.debounce_key IS NOT NULL THEN
            IF enqueue.debounce_wait IS NULL OR enqueue.debounce_max_wait IS NULL
                OR enqueue.debounce_wait < interval '0' OR enqueue.debounce_max_wait < enqueue.debounce_wait THEN
                RAISE EXCEPTION 'enqueue: debounce: wait % and max wait % must satisfy 0 <= wait <= max wait',
                    enqueue.debounce_wait, enqueue.debounce_max_wait USING ERRCODE = '22023';
            END IF;
            IF enqueue.run_at IS NOT NULL THEN
                RAISE EXCEPTION 'enqueue: debounce: sets the run''s start; run_at is not allowed with it' USING ERRCODE = '22023';
            END IF;
            wait_us := floor(extract(epoch FROM enqueue.debounce_wait) * 1000000)::bigint;
            max_us := floor(extract(epoch FROM enqueue.debounce_max_wait) * 1000000)::bigint;
        END IF;
        SELECT format('task "%s" takes a flow key from the input, which a replaced input would change', t->>'name') INTO bad
        FROM jsonb_array_elements(v.templates) t
        WHERE jsonb_path_exists(t, 'strict $.concurrency.Path[0]', '{}', true) OR jsonb_path_exists(t, 'strict $.rate_limit_def.Path[0]', '{}', true)
        LIMIT 1;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'enqueue: %: %', field, bad USING ERRCODE = '22023';
        END IF;
    END IF;
    q := coalesce(enqueue.queue, nullif(v.definition->>'Queue', ''), 'default');
    IF NOT EXISTS (SELECT 1 FROM queues x WHERE x.name = q) THEN
        INSERT INTO queues (name) VALUES (q) ON CONFLICT DO NOTHING;
    END IF;
    -- The run and its templates as run_insert takes them (store's
    -- runInsertRow and taskInsertRow).
    run := jsonb_build_object('ord', 0, 'workflow', wf, 'input', doc, 'key', enqueue.key,
        'unique_for_us', coalesce(ceil(extract(epoch FROM enqueue.unique_for) * 1000000)::bigint, 0),
        'queue', q, 'priority', coalesce(enqueue.priority, 0), 'available_at', enqueue.run_at,
        'task_count', jsonb_array_length(v.templates), 'version', v.version);
    tpl := (SELECT jsonb_agg((t - 'concurrency' - 'rate_limit_def') || jsonb_build_object(
                'workflow', wf, 'version', v.version,
                'conc_group', t->'concurrency'->'Group', 'conc_path', t->'concurrency'->'Path', 'conc_max', t->'concurrency'->'Max',
                'rate_group', t->'rate_limit_def'->'Group', 'rate_path', t->'rate_limit_def'->'Path',
                'rate_limit', t->'rate_limit_def'->'Limit', 'rate_per_ms', (t->'rate_limit_def'->>'Per')::bigint / 1000000))
            FROM jsonb_array_elements(v.templates) t);
    IF dkey IS NOT NULL THEN
        SELECT d.id INTO out_id FROM run_debounce(run, tpl, dkey, coalesce(wait_us, 0), coalesce(max_us, 0), enqueue.singleton_key IS NOT NULL, true) d;
    ELSE
        SELECT i.id INTO out_id FROM run_insert(jsonb_build_array(run), tpl, true) i;
    END IF;
    RETURN out_id;
END
$fn$;
