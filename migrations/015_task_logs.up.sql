-- Live task logs: what a handler logs through its task handle
-- (TaskHandle.Logger) is appended here in batches while the handler runs,
-- so that an open task page shows each line as it is written and a page
-- opened later still has them. The attempt's end event keeps its own copy
-- in detail (see cairn_task_attempts). Bounded by the engine: at most 200
-- lines per attempt, each message and its attributes cut at 2 KiB.
-- Rows go with their task's run when it is pruned (no foreign key, as
-- task_events and task_steps). No primary key: lines are read by task,
-- in order, and each costs one B-tree entry.
CREATE TABLE task_logs (
    id      bigserial   NOT NULL,               -- line id, increasing in write order
    task_id bigint      NOT NULL,               -- task whose handler logged it (deleted with its run)
    attempt integer     NOT NULL,               -- attempt that logged it
    at      timestamptz NOT NULL,               -- time of the log record
    level   text        NOT NULL,               -- DEBUG, INFO, WARN or ERROR
    msg     text        NOT NULL,               -- message
    attrs   jsonb                               -- attributes as {"key": "value"}; NULL when none
);
CREATE INDEX task_logs_task ON task_logs (task_id, id);
