-- Routing: a worker claims only the tasks it can run.
--
-- An engine records in its worker row the "workflow.task" names it
-- registered, and its claims take only ready tasks whose workflow and
-- name are among them: a task no live worker can run stays ready, with
-- no attempt spent, until a worker that registers it starts (or an
-- engine registers it while running). A worker row whose handles are
-- NULL declared no routing (written by a tool, a test or a build from
-- before this migration): it claims any task of its queues.
ALTER TABLE workers ADD COLUMN handles text[]; -- "workflow.task" names this worker runs and claims; NULL: any task

-- cairn_unroutable: ready tasks that no live worker can run, per queue,
-- workflow and task name. A worker can run a task when it is live
-- (status 'running', as on the site's workers page: the rescuer marks a
-- worker lost once its heartbeat is older than the lease), serves the
-- task's queue and registers its workflow and task (or declared no
-- routing). Rows here wait for a capable worker; they burn no attempt.
CREATE VIEW cairn_unroutable AS
    SELECT g.queue, g.workflow, g.task, g.ready, g.available, g.oldest_ready_at
    FROM (
        SELECT t.queue, t.workflow, t.name AS task, count(*) AS ready,
               count(*) FILTER (WHERE t.available_at <= now()) AS available,
               min(t.available_at) AS oldest_ready_at
        FROM (
            -- Through both claim indexes (see 009_flow_control).
            SELECT queue, workflow, name, available_at FROM tasks WHERE status = 'ready' AND fair_key IS NULL
            UNION ALL
            SELECT queue, workflow, name, available_at FROM tasks WHERE status = 'ready' AND fair_key IS NOT NULL
        ) t
        GROUP BY t.queue, t.workflow, t.name
    ) g
    WHERE NOT EXISTS (
        SELECT 1 FROM workers w
        WHERE w.status = 'running' AND w.queues ? g.queue
            AND (w.handles IS NULL OR g.workflow || '.' || g.task = ANY(w.handles)));
