-- Before 019 every transition wrote its run's row: store what the view
-- reads in.
UPDATE runs r SET status = v.status, done_tasks = v.done_tasks, failed_tasks = v.failed_tasks,
    cancelled_tasks = v.cancelled_tasks, interrupted_tasks = v.interrupted_tasks,
    started_at = v.started_at, finished_at = v.finished_at, updated_at = v.updated_at
FROM cairn_runs v
WHERE v.id = r.id AND r.status = 'pending' AND v.status <> 'pending';
DROP VIEW cairn_runs;
ALTER TABLE tasks DROP COLUMN run_fast;
ALTER TABLE tasks DROP COLUMN first_started_at;
