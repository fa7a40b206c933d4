-- runs as 032 made it, without the debounce columns
-- (cairn_workflow_versions reads runs: dropped first, made again last).
DROP VIEW cairn_workflow_versions;
DROP VIEW cairn_runs;
DROP VIEW runs;
CREATE VIEW runs AS
    SELECT r.id, r.workflow,
           CASE WHEN f.status IS NOT NULL THEN f.run_status
                WHEN s.first_start IS NOT NULL THEN 'running'
                ELSE r.status END AS status,
           r.paused, r.input, r.idempotency_key, r.queue, r.priority, r.task_count,
           r.created_at,
           coalesce(r.started_at, f.started_at, s.first_start) AS started_at,
           coalesce(r.finished_at, f.finished_at) AS finished_at,
           greatest(r.updated_at, f.updated_at, s.last_start) AS updated_at,
           coalesce(f.done, r.done_tasks) AS done_tasks,
           coalesce(f.failed, r.failed_tasks) AS failed_tasks,
           coalesce(f.cancelled, r.cancelled_tasks) AS cancelled_tasks,
           coalesce(f.interrupted, r.interrupted_tasks) AS interrupted_tasks,
           r.unique_until, r.live_key, r.has_waiters, r.parent_task_id, r.trace_context, r.task_ids,
           r.version, r.rerun_of, r.rerun_from
    FROM run_rows r
    LEFT JOIN LATERAL (
        -- A one-task run left 'pending': its task's state, as a transition
        -- would have stored it.
        SELECT t.status,
               CASE WHEN t.status IN ('completed', 'skipped') THEN 'completed'
                    WHEN t.status IN ('failed', 'cancelled', 'interrupted') THEN t.status
                    WHEN t.status IN ('running', 'deferred') OR t.attempt > 0 THEN 'running'
                    ELSE 'pending' END AS run_status,
               (t.status IN ('completed', 'failed', 'skipped', 'cancelled'))::int AS done,
               (t.status = 'failed')::int AS failed,
               (t.status = 'cancelled')::int AS cancelled,
               (t.status = 'interrupted')::int AS interrupted,
               -- A task that ends without running (cancelled) starts its
               -- run as it ends.
               CASE WHEN t.status IN ('not_started', 'ready') AND t.attempt = 0 THEN NULL
                    ELSE coalesce(t.first_started_at, t.started_at, t.finished_at) END AS started_at,
               CASE WHEN t.status IN ('completed', 'failed', 'skipped', 'cancelled') THEN t.finished_at END AS finished_at,
               t.updated_at
        FROM tasks t
        WHERE r.status = 'pending' AND r.task_count = 1 AND t.id = r.task_ids[1]
        -- The LIMIT keeps this a lookup per run: without one the subquery
        -- is pulled up into a join, which a filtered list planned as a
        -- hash join over every task.
        LIMIT 1
    ) f ON true
    LEFT JOIN LATERAL (
        -- A run of several tasks left 'pending' by its claims: running
        -- since its first claim.
        SELECT min(coalesce(t.first_started_at, t.started_at)) AS first_start, max(t.started_at) AS last_start
        FROM tasks t
        WHERE r.status = 'pending' AND r.task_count > 1 AND t.id = ANY(r.task_ids) AND t.status = 'running'
    ) s ON true;;

CREATE VIEW cairn_runs AS SELECT * FROM runs;

ALTER TABLE run_rows DROP COLUMN debounce_key, DROP COLUMN debounce_at, DROP COLUMN debounce_until; -- drops run_rows_debounce_key

-- As 031 made it.
CREATE VIEW cairn_workflow_versions AS
    SELECT v.workflow, v.version, v.registered_at, v.seen_at, v.compatible,
           coalesce(r.pending, 0) AS pending, coalesce(r.running, 0) AS running,
           coalesce(r.paused, 0) AS paused, coalesce(r.interrupted, 0) AS interrupted,
           coalesce(r.pending + r.running + r.paused + r.interrupted, 0) AS in_flight,
           w.workers, w.worker_names,
           v.rank = 1 AS newest,
           v.rank > 1 AND coalesce(r.pending + r.running + r.paused + r.interrupted, 0) = 0 AS retirable
    FROM (
        SELECT x.*, row_number() OVER (PARTITION BY x.workflow ORDER BY x.registered_at DESC, x.version DESC) AS rank
        FROM workflow_versions x
    ) v
    LEFT JOIN (
        SELECT s.workflow, s.version,
               count(*) FILTER (WHERE s.status = 'pending') AS pending,
               count(*) FILTER (WHERE s.status = 'running') AS running,
               count(*) FILTER (WHERE s.status = 'paused') AS paused,
               count(*) FILTER (WHERE s.status = 'interrupted') AS interrupted
        FROM (
            SELECT t.run_id FROM tasks t WHERE t.status = 'ready' AND t.fair_key IS NULL
            UNION
            SELECT t.run_id FROM tasks t WHERE t.status = 'ready' AND t.fair_key IS NOT NULL
            UNION
            SELECT t.run_id FROM tasks t WHERE t.status IN ('running', 'deferred')
            UNION
            SELECT t.run_id FROM tasks t WHERE t.status = 'interrupted'
            UNION
            SELECT d.run_id FROM run_deps d WHERE d.status IS NULL
        ) f
        -- The LIMIT keeps this a lookup of runs by id per run in flight.
        CROSS JOIN LATERAL (SELECT s.workflow, s.version, s.status FROM runs s WHERE s.id = f.run_id LIMIT 1) s
        WHERE s.version IS NOT NULL
        GROUP BY s.workflow, s.version
    ) r ON r.workflow = v.workflow AND r.version = v.version
    CROSS JOIN LATERAL (
        SELECT count(*) AS workers,
               coalesce(array_agg(k.name || ' #' || k.id ORDER BY k.id) FILTER (WHERE k.id IS NOT NULL), '{}') AS worker_names
        FROM workers k
        WHERE k.status = 'running'
          AND CASE WHEN k.versions IS NOT NULL THEN v.workflow || '@' || v.version = ANY(k.versions)
                   ELSE k.handles IS NULL
                        OR EXISTS (SELECT 1 FROM unnest(k.handles) h WHERE left(h, length(v.workflow) + 1) = v.workflow || '.') END
    ) w;
