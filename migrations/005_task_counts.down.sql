CREATE OR REPLACE VIEW cairn_task_counts AS
    SELECT workflow, queue, status, count(*) AS tasks
    FROM tasks GROUP BY workflow, queue, status;
DROP TRIGGER tasks_count_truncate ON tasks;
DROP TRIGGER tasks_count_delete ON tasks;
DROP TRIGGER tasks_count_update ON tasks;
DROP TRIGGER tasks_count_insert ON tasks;
DROP FUNCTION task_counts_truncate();
DROP FUNCTION task_counts_delta();
DROP TABLE task_count_deltas;
DROP TABLE task_counts;
