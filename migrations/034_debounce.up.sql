-- Debounce and singleton (engine.WithDebounce, WithSingleton): a run
-- enqueued with a debounce key is a normal run whose root tasks are ready
-- from debounce_at on. An enqueue of the key while the newest run holding
-- it has not started (no task ever claimed) replaces that run's input and,
-- for a debounce, moves debounce_at (and its ready tasks' available_at) to
-- least(now + wait, debounce_until). The enqueues of one key take turns on
-- a transaction-level advisory lock of the key (see store/debounce.go).
--
-- The columns are set by the enqueue's transaction, after the run's
-- insert; a run without the options leaves them NULL and costs no entry
-- of the partial index; they are not indexed otherwise, so a replace of
-- debounce_at stays a HOT update.
ALTER TABLE run_rows
    ADD COLUMN debounce_key text,          -- WithDebounce / WithSingleton key; NULL for other runs
    ADD COLUMN debounce_at timestamptz,    -- when the run's root tasks become claimable (debounce); NULL for a singleton
    ADD COLUMN debounce_until timestamptz; -- first enqueue + maxWait: debounce_at never moves past it; NULL for a singleton
-- The newest run of a key, the only one that can still take an enqueue.
CREATE INDEX run_rows_debounce_key ON run_rows (debounce_key, id) WHERE debounce_key IS NOT NULL;

-- runs gains them at the end (the view keeps every column of the table,
-- in its order).
CREATE OR REPLACE VIEW runs AS
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
           r.version, r.rerun_of, r.rerun_from, r.debounce_key, r.debounce_at, r.debounce_until
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

CREATE OR REPLACE VIEW cairn_runs AS SELECT * FROM runs;
