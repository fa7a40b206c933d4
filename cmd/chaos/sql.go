package main

// The chaos command's own statements: its executions table (schema chaos,
// apart from Cairn's) and the checks it makes on Cairn's tables after a
// scenario, read as an operator would read them in SQL. Cairn lives in
// schema cairn (migrations.DefaultSchema).

const sqlCreateExecutions = `CREATE SCHEMA IF NOT EXISTS chaos;
CREATE TABLE IF NOT EXISTS chaos.executions (
    id      bigserial PRIMARY KEY,
    task_id bigint      NOT NULL,
    attempt integer     NOT NULL,
    worker  text        NOT NULL,
    pid     integer     NOT NULL,
    seq     bigint      NOT NULL, -- the handler call's number in its process
    at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (worker, pid, seq)
)`

// sqlRecordExecution is idempotent per handler call: database/sql runs a
// statement again on a new connection when lib/pq reports the first one's
// connection bad, which it can do after the server committed it (the
// lost-ack scenario does exactly that), and a handler call must count
// once however often its row is sent.
const sqlRecordExecution = `INSERT INTO chaos.executions (task_id, attempt, worker, pid, seq) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (worker, pid, seq) DO NOTHING`

// sqlCountCompleted is the progress the controller samples.
const sqlCountCompleted = `SELECT count(*) FROM cairn.tasks WHERE status = 'completed'`

// sqlCountUnfinished counts the tasks a drain waits for.
const sqlCountUnfinished = `SELECT count(*) FROM cairn.tasks WHERE status NOT IN ('completed', 'failed', 'cancelled', 'skipped')`

// sqlVerify sums a scenario up. An execution of an attempt before the
// task's last executed one is explained when the attempt ended without
// completing: rescued (lease expired), interrupted, or failed and retried;
// an attempt executed twice is never explained.
const sqlVerify = `WITH ex AS (
    SELECT task_id, attempt, count(*) AS n FROM chaos.executions GROUP BY task_id, attempt
), last AS (
    SELECT task_id, max(attempt) AS attempt FROM ex GROUP BY task_id
), earlier AS (
    SELECT ex.task_id, ex.attempt,
           EXISTS (SELECT 1 FROM cairn.task_events e
                   WHERE e.task_id = ex.task_id AND e.attempt = ex.attempt
                     AND e.from_status IN ('running', 'deferred') AND e.to_status <> 'completed') AS explained
    FROM ex JOIN last USING (task_id) WHERE ex.attempt < last.attempt
)
SELECT (SELECT count(*) FROM cairn.tasks),
       (SELECT count(*) FROM cairn.tasks WHERE status = 'completed'),
       (SELECT coalesce(sum(n), 0) FROM ex),
       (SELECT count(*) FROM earlier WHERE explained),
       (SELECT count(*) FROM earlier WHERE NOT explained) + (SELECT coalesce(sum(n - 1), 0) FROM ex WHERE n > 1),
       (SELECT count(*) FROM cairn.tasks t WHERE t.status = 'completed'
            AND NOT EXISTS (SELECT 1 FROM chaos.executions x WHERE x.task_id = t.id)),
       (SELECT count(*) FROM cairn.task_events WHERE error LIKE 'lease expired%'),
       (SELECT count(*) FROM (SELECT task_id FROM cairn.task_events WHERE to_status = 'completed'
                              GROUP BY task_id HAVING count(*) > 1) twice)`

// sqlTerminateWorkers kills the backends of the workers (their
// application_name starts with chaos-worker).
const sqlTerminateWorkers = `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'chaos-worker%'`

// sqlCountRescues counts the rescues so far.
const sqlCountRescues = `SELECT count(*) FROM cairn.task_events WHERE error LIKE 'lease expired%'`

// sqlCountHeld counts the tasks a live worker of that name holds.
const sqlCountHeld = `SELECT count(*) FROM cairn.tasks t JOIN cairn.workers w ON w.id = t.worker_id
WHERE w.name = $1 AND w.status = 'running' AND t.status IN ('running', 'deferred')`

// sqlDuplicateExamples describes a few tasks executed again without an
// explanation: each execution (attempt, worker, pid) and each event of
// the task (attempt, from, to, error).
const sqlDuplicateExamples = `WITH ex AS (
    SELECT task_id, attempt, count(*) AS n FROM chaos.executions GROUP BY task_id, attempt
), last AS (
    SELECT task_id, max(attempt) AS attempt FROM ex GROUP BY task_id
), bad AS (
    SELECT task_id FROM ex WHERE n > 1
    UNION
    SELECT ex.task_id FROM ex JOIN last USING (task_id) WHERE ex.attempt < last.attempt
      AND NOT EXISTS (SELECT 1 FROM cairn.task_events e WHERE e.task_id = ex.task_id AND e.attempt = ex.attempt
                      AND e.from_status IN ('running', 'deferred') AND e.to_status <> 'completed')
)
SELECT b.task_id,
       (SELECT string_agg(format('a%s@%s/%s', x.attempt, x.worker, x.pid), ' ' ORDER BY x.id) FROM chaos.executions x WHERE x.task_id = b.task_id),
       (SELECT string_agg(format('a%s:%s->%s%s', e.attempt, coalesce(e.from_status, '-'), e.to_status,
                                 coalesce(' (' || left(e.error, 60) || ')', '')), ' ' ORDER BY e.id)
          FROM cairn.task_events e WHERE e.task_id = b.task_id)
FROM bad b ORDER BY b.task_id LIMIT 3`

// sqlCountExecutionsSince counts a worker's executions since a time.
const sqlCountExecutionsSince = `SELECT count(*) FROM chaos.executions WHERE worker = $1 AND at > $2`
