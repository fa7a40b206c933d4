-- runs tells the truth: the name every reader reaches for is the exact
-- view, and the table the engine writes is run_rows.
--
-- Since 019 the hot path leaves some run rows behind: a claim writes no
-- run row, and the transitions of a one-task run without a key, parent,
-- dependencies or waiters ("fast") never write it, so a stored status may
-- say 'pending' for a run that is running or long finished. 019 read the
-- truth back in the view cairn_runs, but runs, the table every SQL user,
-- monitoring query and script reaches for, still answered with the stale
-- row. Now:
--
-- * run_rows is the table (renamed: its indexes, constraints, sequence and
--   triggers keep their runs_* names). Its status, counters and times may
--   lag; it is not offered for reading.
-- * runs is a view of run_rows with status, done/failed/cancelled/
--   interrupted counters and started/finished/updated times exact at
--   commit for every kind of run (one task, DAG, paused, child, awaited),
--   and every other column of the table, in the table's order. It is
--   read-only: write through the engine.
-- * cairn_runs, the view 019 added, stays as an alias of runs for
--   queries written against it.
--
-- A run whose stored status is not 'pending' costs the view nothing more;
-- a stored-'pending' one a probe of its task (one task) or of its tasks'
-- ids (several). The engine's hot statements write run_rows as before.
DROP VIEW cairn_runs;
ALTER TABLE runs RENAME TO run_rows;

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
           r.unique_until, r.live_key, r.has_waiters, r.parent_task_id, r.trace_context, r.task_ids
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
    ) s ON true;

CREATE VIEW cairn_runs AS SELECT * FROM runs;
