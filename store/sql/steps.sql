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
-- TaskStepSaveMany: journal many steps, of many tasks, in one statement
-- (the step writer's batch, see TaskStepSaveMany): each task row locked
-- FOR SHARE (in id order, a probe of the primary key each: lateral, so
-- that no plan scans the table) while it is still its holder's, the steps of
-- the rows locked inserted unless journaled, and for each save (i, in
-- order) whether its task was held and the step stored under its name:
-- the one inserted, else the one journaled before the statement began
-- (none when another write of the same name committed meanwhile: the
-- store reads it after). Argument: a JSON array of {i, t (task), w
-- (worker), a (attempt), n (name), v (result)}.
-- TaskCheckpointMany: store many tasks' checkpoints in one statement:
-- each task row locked (FOR UPDATE, in id order, a probe of the primary
-- key each) while it is still its holder's and updated with the last
-- checkpoint given for it (highest i); for each save (i, in order)
-- whether its task was held. Argument: a JSON array of {i, t, w, a, v
-- (checkpoint)}.

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


-- name: TaskStepSaveMany
WITH req AS MATERIALIZED (
	SELECT * FROM jsonb_to_recordset((SELECT ?::jsonb)) AS r(i int, t bigint, w bigint, a int, n text, v jsonb)
), held AS MATERIALIZED (
	SELECT r.i, r.t, r.a, r.n, r.v FROM (SELECT * FROM req ORDER BY t, i) r
	CROSS JOIN LATERAL (
		SELECT k.id FROM ?schema.tasks k
		WHERE k.id = r.t AND (k.worker_id = r.w AND k.attempt = r.a AND k.status IN ('running', 'deferred')) IS TRUE
		FOR SHARE
	) k
), ins AS (
	INSERT INTO ?schema.task_steps (task_id, name, result, attempt)
	SELECT t, n, v, a FROM held ORDER BY t, n
	ON CONFLICT (task_id, name) DO NOTHING
	RETURNING task_id, name, result, attempt, at
)
SELECT r.i, h.i IS NOT NULL AS held, coalesce(ins.result, s.result) AS result,
	coalesce(ins.attempt, s.attempt) AS attempt, coalesce(ins.at, s.at) AS at
FROM req r
LEFT JOIN held h ON h.i = r.i
LEFT JOIN ins ON h.i IS NOT NULL AND ins.task_id = r.t AND ins.name = r.n
LEFT JOIN LATERAL (
	SELECT s.result, s.attempt, s.at FROM ?schema.task_steps s
	WHERE h.i IS NOT NULL AND ins.task_id IS NULL AND s.task_id = r.t AND s.name = r.n
	LIMIT 1 -- not flattened into a join that could scan the table
) s ON true
ORDER BY r.i

-- name: TaskCheckpointMany
WITH req AS MATERIALIZED (
	SELECT * FROM jsonb_to_recordset((SELECT ?::jsonb)) AS r(i int, t bigint, w bigint, a int, v jsonb)
), last AS MATERIALIZED (
	SELECT DISTINCT ON (t) * FROM req ORDER BY t, i DESC
), held AS MATERIALIZED (
	SELECT r.i, r.t, r.w, r.a, r.v FROM last r
	CROSS JOIN LATERAL (
		SELECT k.id FROM ?schema.tasks k
		WHERE k.id = r.t AND (k.worker_id = r.w AND k.attempt = r.a AND k.status IN ('running', 'deferred')) IS TRUE
		FOR UPDATE
	) k
), upd AS (
	UPDATE ?schema.tasks k SET checkpoint = h.v, updated_at = now()
	FROM held h
	WHERE k.id = ANY(ARRAY(SELECT t FROM held)) AND k.id = h.t
	RETURNING k.id
)
SELECT r.i, EXISTS (SELECT 1 FROM held h WHERE h.t = r.t AND h.w = r.w AND h.a = r.a) AS held,
	(SELECT count(*) FROM upd) AS updated
FROM req r
ORDER BY r.i

