-- cairn_unroutable as 010 made it, without the version.
DROP VIEW cairn_unroutable;
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
