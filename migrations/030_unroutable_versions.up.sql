-- cairn_unroutable gains the version: a ready task is unroutable also
-- when every live worker that runs its task serves other versions of its
-- workflow than its run's (a rolling deploy whose old workers are gone,
-- see 029_workflow_versions). One row per queue, workflow, task and
-- version (NULL: a run from before versions, served by any worker).
CREATE OR REPLACE VIEW cairn_unroutable AS
    SELECT g.queue, g.workflow, g.task, g.ready, g.available, g.oldest_ready_at, g.version
    FROM (
        SELECT t.queue, t.workflow, t.name AS task, t.version, count(*) AS ready,
               count(*) FILTER (WHERE t.available_at <= now()) AS available,
               min(t.available_at) AS oldest_ready_at
        FROM (
            -- Through both claim indexes (see 009_flow_control).
            SELECT queue, workflow, name, version, available_at FROM tasks WHERE status = 'ready' AND fair_key IS NULL
            UNION ALL
            SELECT queue, workflow, name, version, available_at FROM tasks WHERE status = 'ready' AND fair_key IS NOT NULL
        ) t
        GROUP BY t.queue, t.workflow, t.name, t.version
    ) g
    WHERE NOT EXISTS (
        SELECT 1 FROM workers w
        WHERE w.status = 'running' AND w.queues ? g.queue
            AND (w.handles IS NULL OR g.workflow || '.' || g.task = ANY(w.handles))
            AND (g.version IS NULL OR w.versions IS NULL OR g.workflow || '@' || g.version = ANY(w.versions)));
