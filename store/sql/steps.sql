-- Durable steps and checkpoints (engine.Step, the durable waits,
-- TaskHandle.Checkpoint): prepared statements, each a probe of the task's
-- primary key. The holder's conditions (worker, attempt, running or
-- deferred) are wrapped in "IS TRUE" so that they cannot pick an index:
-- after a bulk enqueue, statistics that say nothing runs made the planner
-- scan the partial index tasks_lease instead of the primary key.
--
-- TaskStepLock: lock the task row (FOR SHARE) while it is still the
-- holder's; no row: it is not. Arguments: task id, worker id, attempt.
-- TaskStepInsert: journal a step unless one of its name is; the row when
-- it was inserted. Arguments: task id, name, result, attempt.
-- TaskStepGet: a journaled step. Arguments: task id, name.
-- TaskCheckpoint: store a checkpoint while the task is the holder's; its
-- id when it was. Arguments: checkpoint, task id, worker id, attempt.

-- name: TaskStepLock
SELECT id FROM ?schema.tasks
WHERE id = ? AND (worker_id = ? AND attempt = ? AND status IN ('running', 'deferred')) IS TRUE
FOR SHARE

-- name: TaskStepInsert
INSERT INTO ?schema.task_steps (task_id, name, result, attempt) VALUES (?, ?, ?::jsonb, ?)
ON CONFLICT (task_id, name) DO NOTHING
RETURNING task_id, name, result, attempt, at

-- name: TaskStepGet
SELECT task_id, name, result, attempt, at FROM ?schema.task_steps WHERE task_id = ? AND name = ?

-- name: TaskCheckpoint
UPDATE ?schema.tasks SET checkpoint = ?::jsonb, updated_at = now()
WHERE id = ? AND (worker_id = ? AND attempt = ? AND status IN ('running', 'deferred')) IS TRUE
RETURNING id

