-- A run lists its tasks' ids; tasks lose their (run_id, idx) index.
--
-- No task update can be HOT (every transition changes status, which index
-- predicates name), so each one adds an entry to every index of tasks:
-- with tasks_run_idx, two of a transition's two or three. A 10-task
-- workflow wrote 29 of them per run, a single task 2, about a quarter of
-- the B-tree entries of the hot path. Yet the hot path asks (run, idx)
-- of a handful of rows: a finish its dependents, a claim its
-- dependencies' outputs. runs.task_ids answers that from the run row,
-- written once at enqueue: the ids of the run's tasks in idx order
-- (task_ids[idx + 1]), so every lookup of a run's tasks is a probe of
-- tasks_pkey. Without the index, a 10-task workflow's statements ran
-- 7-12% shorter and wrote 12% less WAL; a burn-down's, 6-16% shorter.
--
-- Deleting a run deleted its tasks through the foreign key, whose cascade
-- needs an index on tasks.run_id; the trigger runs_delete_tasks now
-- deletes them by id instead, one statement per DELETE of runs. A BRIN
-- index on run_id (tasks are inserted in run order; a few bytes per range
-- of pages, nothing per update) keeps ad-hoc SQL that filters tasks by
-- run_id from reading the whole table; the engine and the views use
-- task_ids.
ALTER TABLE runs ADD COLUMN task_ids bigint[] NOT NULL DEFAULT '{}';
UPDATE runs r SET task_ids = t.ids
FROM (SELECT run_id, array_agg(id ORDER BY idx) AS ids FROM tasks GROUP BY run_id) t
WHERE t.run_id = r.id;

CREATE FUNCTION runs_delete_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM tasks WHERE id = ANY(ARRAY(SELECT unnest(task_ids) FROM old_runs));
    RETURN NULL;
END $$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION runs_delete_tasks() SET search_path = %I, pg_catalog', current_schema());
END $$;
CREATE TRIGGER runs_delete_tasks AFTER DELETE ON runs
    REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION runs_delete_tasks();

ALTER TABLE tasks DROP CONSTRAINT tasks_run_id_fkey;
DROP INDEX tasks_run_idx;
CREATE INDEX tasks_run_brin ON tasks USING brin (run_id);

-- cairn_runs (see 019) finds a stored-'pending' run's tasks by id.
CREATE OR REPLACE VIEW cairn_runs AS
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
        WHERE r.status = 'pending' AND r.task_count = 1 AND t.id = r.task_ids[1]
        -- One task. The LIMIT also keeps this a lookup per run: a
        -- subquery without one is pulled up into a join, which a
        -- filtered list planned as a hash join over every task (a
        -- status=failed page took 370 ms instead of 15).
        LIMIT 1
    ) f ON true
    LEFT JOIN LATERAL (
        SELECT min(coalesce(t.first_started_at, t.started_at)) AS first_start, max(t.started_at) AS last_start
        FROM tasks t
        WHERE r.status = 'pending' AND r.task_count > 1 AND t.id = ANY(r.task_ids) AND t.status = 'running'
    ) s ON true;
