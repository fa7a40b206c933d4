DROP VIEW cairn_flow_keys;
CREATE OR REPLACE VIEW cairn_queue_depth AS
    SELECT q.name AS queue, q.paused, q.max_running,
           r.ready, r.available, h.running, h.deferred, r.oldest_ready_at
    FROM queues q
    CROSS JOIN LATERAL (
        SELECT count(*) AS ready,
               count(*) FILTER (WHERE t.available_at <= now()) AS available,
               min(t.available_at) AS oldest_ready_at
        FROM tasks t WHERE t.queue = q.name AND t.status = 'ready'
    ) r
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE t.status = 'running') AS running,
               count(*) FILTER (WHERE t.status = 'deferred') AS deferred
        FROM tasks t WHERE t.queue = q.name AND t.status IN ('running', 'deferred')
    ) h;
DROP INDEX tasks_conc_running;
DROP INDEX tasks_claim_keyed;
DROP INDEX tasks_claim;
ALTER TABLE tasks DROP COLUMN fair_key, DROP COLUMN conc_key, DROP COLUMN rate_key;
CREATE INDEX tasks_claim ON tasks (queue, priority, available_at, id) WHERE status = 'ready';
DROP TABLE flow_keys;
