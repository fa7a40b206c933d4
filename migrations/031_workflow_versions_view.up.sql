-- cairn_workflow_versions: the deploy as an operator reads it, one row per
-- workflow and version of workflow_versions:
--
-- * registered_at, seen_at, compatible: as registered.
-- * pending, running, paused, interrupted: its runs in flight by status,
--   and in_flight their sum. Read from the exact view runs (a run of the
--   version: runs.version equal to it). Finished runs are not counted:
--   they are history, as many as are kept.
-- * workers, worker_names: the live workers (status 'running') that serve
--   it: its "workflow@version" among their versions, or, for a worker
--   that lists no versions (it serves any), one that declared no routing
--   or registers a task of the workflow ("workflow.task" among its
--   handles). Names are "name #id", by id.
-- * newest: the version registered last for its workflow (the version
--   text breaks a tie). retirable: not the newest and no run in flight:
--   the last run of the version has finished and its workers can go.
--
-- Its cost follows the runs in flight (the backlog), not the runs kept:
-- it reads the ids of the runs in flight from the partial indexes that
-- already hold them, then each one's exact status from runs by id. A run
-- in flight has a task that has not finished (one that has all its tasks
-- finished has finished; a cancel ends every task). Such a task is ready
-- (tasks_claim, tasks_claim_keyed: a paused run's tasks stay ready, the
-- claim skips them), running or deferred (tasks_lease: a durable wait, a
-- child run awaited), interrupted (tasks_interrupted), or not_started.
-- A not_started task waits for a dependency of its run that has not
-- finished, itself one of these, so the run is found through it; or, a
-- root, for runs it was enqueued after (WithAfter): then its run has a
-- row of run_deps whose status is still NULL (run_deps_waiting), written
-- in the transaction that releases the roots. No run in flight is missed;
-- a run found twice counts once (UNION), one found that has finished (a
-- waiting run cancelled) in no column. No index is added, so an enqueue
-- costs what it did. Read it with JIT off, like any list over runs.
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
