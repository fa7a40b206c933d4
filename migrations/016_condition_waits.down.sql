ALTER TABLE tasks
    DROP COLUMN IF EXISTS wait_every_ms;
