-- cairn_workflow_versions: the deploy as an operator reads it, one row per
-- workflow and version of workflow_versions:
--
-- * registered_at, seen_at, compatible: as registered.
-- * pending, running, paused, interrupted: its runs in flight by status,
--   and in_flight their sum; finished its completed, failed and cancelled
--   runs, last_finished_at the latest end among them. Read from the exact
--   view runs (a run of the version: runs.version equal to it).
-- * workers, worker_names: the live workers (status 'running') that serve
--   it: its "workflow@version" among their versions, or, for a worker
--   that lists no versions (it serves any), one that declared no routing
--   or registers a task of the workflow ("workflow.task" among its
--   handles). Names are "name #id", by id.
-- * newest: the version registered last for its workflow (the version
--   text breaks a tie). retirable: not the newest and no run in flight:
--   the last run of the version has finished and its workers can go.
--
-- The runs are counted in one pass over the runs of the workflows read
-- (grouped by version, through runs_workflow_created when one workflow
-- is asked for); no index is added, so an enqueue costs what it did.
-- Read it with JIT off, like any list over runs.
CREATE VIEW cairn_workflow_versions AS
    SELECT v.workflow, v.version, v.registered_at, v.seen_at, v.compatible,
           coalesce(r.pending, 0) AS pending, coalesce(r.running, 0) AS running,
           coalesce(r.paused, 0) AS paused, coalesce(r.interrupted, 0) AS interrupted,
           coalesce(r.pending + r.running + r.paused + r.interrupted, 0) AS in_flight,
           coalesce(r.finished, 0) AS finished, r.last_finished_at,
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
               count(*) FILTER (WHERE s.status = 'interrupted') AS interrupted,
               count(*) FILTER (WHERE s.status IN ('completed', 'failed', 'cancelled')) AS finished,
               max(s.finished_at) FILTER (WHERE s.status IN ('completed', 'failed', 'cancelled')) AS last_finished_at
        FROM runs s
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
