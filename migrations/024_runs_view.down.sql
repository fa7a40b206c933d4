-- runs is the table again, cairn_runs the exact view (as 022 left it).
DROP VIEW cairn_runs;
DROP VIEW runs;
ALTER TABLE run_rows RENAME TO runs;
CREATE VIEW cairn_runs AS
    SELECT r.id, r.workflow,
           CASE WHEN f.status IS NOT NULL THEN f.run_status
                WHEN s.first_start IS NOT NULL THEN 'running'
                ELSE r.status END AS status,
           r.paused, r.input, r.idempotency_key, r.unique_until, r.live_key, r.queue, r.priority, r.task_count,
           coalesce(f.done, r.done_tasks) AS done_tasks,
           coalesce(f.failed, r.failed_tasks) AS failed_tasks,
           coalesce(f.cancelled, r.cancelled_tasks) AS cancelled_tasks,
           coalesce(f.interrupted, r.interrupted_tasks) AS interrupted_tasks,
           r.created_at,
           coalesce(r.started_at, f.started_at, s.first_start) AS started_at,
           coalesce(r.finished_at, f.finished_at) AS finished_at,
           greatest(r.updated_at, f.updated_at, s.last_start) AS updated_at,
           r.parent_task_id, r.trace_context, r.has_waiters
    FROM runs r
    LEFT JOIN LATERAL (
        SELECT t.status,
               CASE WHEN t.status IN ('completed', 'skipped') THEN 'completed'
                    WHEN t.status IN ('failed', 'cancelled', 'interrupted') THEN t.status
                    WHEN t.status IN ('running', 'deferred') OR t.attempt > 0 THEN 'running'
                    ELSE 'pending' END AS run_status,
               (t.status IN ('completed', 'failed', 'skipped', 'cancelled'))::int AS done,
               (t.status = 'failed')::int AS failed,
               (t.status = 'cancelled')::int AS cancelled,
               (t.status = 'interrupted')::int AS interrupted,
               CASE WHEN t.status IN ('not_started', 'ready') AND t.attempt = 0 THEN NULL
                    ELSE coalesce(t.first_started_at, t.started_at, t.finished_at) END AS started_at,
               CASE WHEN t.status IN ('completed', 'failed', 'skipped', 'cancelled') THEN t.finished_at END AS finished_at,
               t.updated_at
        FROM tasks t
        WHERE r.status = 'pending' AND r.task_count = 1 AND t.id = r.task_ids[1]
        LIMIT 1
    ) f ON true
    LEFT JOIN LATERAL (
        SELECT min(coalesce(t.first_started_at, t.started_at)) AS first_start, max(t.started_at) AS last_start
        FROM tasks t
        WHERE r.status = 'pending' AND r.task_count > 1 AND t.id = ANY(r.task_ids) AND t.status = 'running'
    ) s ON true;
