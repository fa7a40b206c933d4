-- Back to one plain task_events table with every row of every partition
-- (the DEFAULT one included). This copies the whole history once.
DROP VIEW cairn_task_attempts;
ALTER TABLE task_events RENAME TO task_events_partitioned;
ALTER INDEX task_events_task RENAME TO task_events_partitioned_task;
ALTER INDEX task_events_at RENAME TO task_events_partitioned_at;

CREATE TABLE task_events (
    id          bigint      NOT NULL DEFAULT nextval('task_events_id_seq'), -- event id, increasing in commit-ish order
    run_id      bigint      NOT NULL,                   -- run of the task
    task_id     bigint      NOT NULL,                   -- task that moved (deleted with its run)
    from_status text,                                   -- NULL when the task was created
    to_status   text        NOT NULL,                   -- new state
    worker_id   bigint,                                 -- worker that made or held the transition
    attempt     integer     NOT NULL DEFAULT 0,         -- attempt number at the transition
    at          timestamptz NOT NULL DEFAULT now(),     -- transaction time of the transition
    error       text,                                   -- error of a failed attempt, reason of a rescue
    detail      jsonb                                   -- extra: stack, attempt log, cancel reason
);
-- Partitions in range order, so rows keep (about) their time order.
INSERT INTO task_events SELECT * FROM task_events_partitioned;
ALTER SEQUENCE task_events_id_seq OWNED BY task_events.id;
DROP TABLE task_events_partitioned;
CREATE INDEX task_events_task ON task_events (task_id, id);
CREATE INDEX task_events_at ON task_events USING brin (at);

CREATE VIEW cairn_task_attempts AS
    SELECT task_id, run_id, attempt, worker_id, to_status AS outcome, at AS ended_at, error, detail
    FROM task_events
    WHERE from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred');
