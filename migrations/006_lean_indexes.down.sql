CREATE OR REPLACE VIEW cairn_queue_depth AS
    SELECT q.name AS queue, q.paused, q.max_running,
           count(t.id) FILTER (WHERE t.status = 'ready')                           AS ready,
           count(t.id) FILTER (WHERE t.status = 'ready' AND t.available_at <= now()) AS available,
           count(t.id) FILTER (WHERE t.status = 'running')                         AS running,
           count(t.id) FILTER (WHERE t.status = 'deferred')                        AS deferred,
           min(t.available_at) FILTER (WHERE t.status = 'ready')                   AS oldest_ready_at
    FROM queues q
    LEFT JOIN tasks t ON t.queue = q.name AND t.status IN ('ready', 'running', 'deferred')
    GROUP BY q.name;
DROP INDEX task_events_at;
CREATE INDEX task_events_at ON task_events (at);
CREATE INDEX tasks_worker ON tasks (worker_id) WHERE status IN ('running', 'deferred');
CREATE INDEX tasks_status_updated ON tasks (status, updated_at DESC, id DESC);
