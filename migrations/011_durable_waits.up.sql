-- Durable waits: journaled steps, durable sleep and signals with payload.
--
-- A handler's steps (engine.Step, and the waits of Sleep and AwaitSignal)
-- are journaled here, keyed by task and step name: a later attempt of the
-- task reads them back instead of running them again. Rows go with their
-- task's run when it is pruned (no foreign key, as task_events: a
-- foreign key would add a check to every update of tasks).
CREATE TABLE task_steps (
    task_id bigint      NOT NULL,               -- task that ran the step (deleted with its run)
    name    text        NOT NULL,               -- step name, unique within the task
    result  jsonb       NOT NULL,               -- JSON result of the step
    attempt integer     NOT NULL,               -- attempt that ran it
    at      timestamptz NOT NULL DEFAULT now(), -- when it was journaled
    PRIMARY KEY (task_id, name)
);

-- Signals sent to a task with engine.SendSignal; AwaitSignal consumes the
-- oldest unconsumed one of its name, once.
CREATE TABLE task_signals (
    id               bigserial   PRIMARY KEY,        -- signal id, increasing in send order
    task_id          bigint      NOT NULL,           -- task it is sent to (deleted with its run)
    name             text        NOT NULL,           -- signal name
    payload          jsonb       NOT NULL,           -- JSON payload
    sent_at          timestamptz NOT NULL DEFAULT now(), -- when it was sent
    consumed_at      timestamptz,                    -- when an AwaitSignal took it; NULL while pending
    consumed_attempt integer                         -- attempt of the task that took it
);
CREATE INDEX task_signals_task ON task_signals (task_id, name, id);

-- The durable wait a deferred task is parked in: written by the park
-- itself and cleared by any move out of deferred, so no other write of a
-- task pays for them. Not indexed: the park and resume writes change them,
-- and an index would cost those writes an entry each (see 007_hot_path).
ALTER TABLE tasks
    ADD COLUMN wait_kind  text,        -- 'sleep', 'signal' or 'runs' (AwaitRuns) while parked in a durable wait, else NULL
    ADD COLUMN wait_name  text,        -- signal name of a signal wait
    ADD COLUMN wait_until timestamptz, -- wake time of a sleep, deadline of a signal wait (NULL: none)
    ADD COLUMN wait_since timestamptz; -- when the wait began (its first park, kept across attempts)

-- cairn_durable_waits: tasks parked in a durable wait right now, read
-- through tasks_lease (deferred rows only).
CREATE VIEW cairn_durable_waits AS
    SELECT t.id AS task_id, t.run_id, t.workflow, t.name AS task_name, t.wait_kind AS kind,
           t.wait_until AS until, t.wait_name AS name, t.wait_since AS since, t.worker_id
    FROM tasks t
    WHERE t.status = 'deferred' AND t.wait_kind IS NOT NULL;
