-- The hot path writes fewer run rows; cairn_runs reads in what it leaves
-- out. Everything that reads a run's status, counters or times reads
-- cairn_runs: the store, the site, the API, and SQL monitoring.
--
-- 1. A claim no longer writes its run's row. A run's stored status stays
--    'pending' (started_at NULL) from its enqueue until the next
--    transition of one of its tasks writes the row (a finish, a park, a
--    failure: each updates the run's counters or stores its start). Until
--    then a stored-'pending' run with a 'running' task is running, since
--    the earliest start of its running tasks; a one-task run's state is
--    its task's.
-- 2. No transition writes the row of a "fast" run: one task, no
--    idempotency key, no parent task, no run dependencies, nothing
--    waiting for it, never paused or refreshed. Its stored status stays
--    'pending', so its status, counters and times are read from its task
--    as in 1. tasks.run_fast marks the task of such a run; the enqueue
--    sets it. Whatever needs the row exact (pausing, a refresh after a
--    retry or requeue, a run enqueued to wait for it, a bulk delete)
--    first clears the flag, under the task's row lock, and stores what
--    this view reads (see store.runMaterialize): from then on its
--    transitions write the row as any run's do.
--
-- A stored row that is not 'pending' costs the view no lookup; a
-- 'pending' one a probe of tasks_run_idx.
ALTER TABLE tasks ADD COLUMN run_fast boolean NOT NULL DEFAULT false;
-- The start of a task's first attempt (started_at is its latest's), set
-- by its first claim: a run's start, read from its tasks. NULL for a task
-- claimed before 019 (read coalesce(first_started_at, started_at)).
ALTER TABLE tasks ADD COLUMN first_started_at timestamptz;

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
        -- A one-task run: its task's state, as a transition would have
        -- stored it.
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
        WHERE r.status = 'pending' AND r.task_count = 1 AND t.run_id = r.id
        -- One task. The LIMIT also keeps this a lookup per run: a
        -- subquery without one is pulled up into a join, which a
        -- filtered list planned as a hash join over every task (a
        -- status=failed page took 370 ms instead of 15).
        LIMIT 1
    ) f ON true
    LEFT JOIN LATERAL (
        SELECT min(coalesce(t.first_started_at, t.started_at)) AS first_start, max(t.started_at) AS last_start
        FROM tasks t
        WHERE r.status = 'pending' AND r.task_count > 1 AND t.run_id = r.id AND t.status = 'running'
    ) s ON true;
