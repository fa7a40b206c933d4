DROP VIEW IF EXISTS cairn_durable_waits;
ALTER TABLE tasks
    DROP COLUMN IF EXISTS wait_kind,
    DROP COLUMN IF EXISTS wait_name,
    DROP COLUMN IF EXISTS wait_until,
    DROP COLUMN IF EXISTS wait_since;
DROP TABLE IF EXISTS task_signals;
DROP TABLE IF EXISTS task_steps;
