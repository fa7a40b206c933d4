ALTER TABLE runs RESET (fillfactor);
ALTER TABLE runs
    DROP COLUMN tasks_done,
    DROP COLUMN tasks_failed,
    DROP COLUMN tasks_cancelled,
    DROP COLUMN tasks_interrupted;
