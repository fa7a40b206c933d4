-- Fewer indexes to maintain per transition: every task update is a new row
-- version, so each index on tasks costs an insertion per transition, and
-- each index on task_events one per event.

-- No query reads tasks by (status, updated_at): lists by state go through
-- the partial indexes (tasks_claim, tasks_lease) or a run's tasks.
DROP INDEX tasks_status_updated;

-- Tasks held by a worker are found among the running and deferred tasks
-- through tasks_lease: that set is bounded by the workers' slots and
-- deferrals, and one index fewer is maintained on every claim.
DROP INDEX tasks_worker;

-- Event time only grows (transaction time), so a block-range index serves
-- the time-window reads (throughput chart) and costs next to nothing to
-- maintain.
DROP INDEX task_events_at;
CREATE INDEX task_events_at ON task_events USING brin (at);

-- Queue depth per queue from the partial indexes: ready tasks through
-- tasks_claim, running and deferred ones through tasks_lease.
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
