DROP TRIGGER IF EXISTS runs_wake_parent ON runs;
DROP FUNCTION IF EXISTS cairn_wake_parent();
DROP INDEX IF EXISTS runs_parent_task;
ALTER TABLE runs DROP COLUMN IF EXISTS parent_task_id;
