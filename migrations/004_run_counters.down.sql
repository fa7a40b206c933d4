ALTER TABLE runs RESET (fillfactor);
ALTER TABLE runs
    DROP COLUMN done_tasks,
    DROP COLUMN failed_tasks,
    DROP COLUMN cancelled_tasks,
    DROP COLUMN interrupted_tasks;
