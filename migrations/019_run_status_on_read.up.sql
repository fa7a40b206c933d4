-- A claim no longer writes its run's row. A run's stored status stays
-- 'pending' (and started_at NULL) from its enqueue until the first
-- transition after its first claim writes the row (a finish, a park, a
-- failure: every one of them updates the run's counters or its start),
-- so between the two a stored 'pending' run whose task is 'running' is
-- running. cairn_runs is runs with that read in: status, started_at and
-- updated_at as the run row would hold them had the claim written it.
-- Everything that reads a run's status reads it here: the store, the
-- site, the API, and SQL monitoring. A run row that is not 'pending'
-- costs no lookup; a 'pending' one one probe of tasks_run_idx.
CREATE VIEW cairn_runs AS
    SELECT r.id, r.workflow,
           CASE WHEN s.first_start IS NOT NULL THEN 'running' ELSE r.status END AS status,
           r.paused, r.input, r.idempotency_key, r.unique_until, r.live_key, r.queue, r.priority,
           r.task_count, r.done_tasks, r.failed_tasks, r.cancelled_tasks, r.interrupted_tasks, r.created_at,
           coalesce(r.started_at, s.first_start) AS started_at, r.finished_at,
           greatest(r.updated_at, s.last_start) AS updated_at,
           r.parent_task_id, r.trace_context, r.has_waiters
    FROM runs r
    LEFT JOIN LATERAL (
        SELECT min(t.started_at) AS first_start, max(t.started_at) AS last_start
        FROM tasks t
        WHERE r.status = 'pending' AND t.run_id = r.id AND t.status = 'running'
    ) s ON true;
