-- Per-run task counters. A transition adds its deltas to the run row, and
-- the run's status is derived from the counters in the same update. The
-- update takes the run row's latest version (PostgreSQL re-reads a row
-- that another transaction changed meanwhile), so two transactions that
-- finish the last two tasks of a run cannot each miss the other's task, as
-- a status recomputed from each statement's snapshot of tasks could.
ALTER TABLE runs
    ADD COLUMN done_tasks        integer NOT NULL DEFAULT 0, -- tasks completed, skipped, failed or cancelled
    ADD COLUMN failed_tasks      integer NOT NULL DEFAULT 0, -- tasks failed
    ADD COLUMN cancelled_tasks   integer NOT NULL DEFAULT 0, -- tasks cancelled
    ADD COLUMN interrupted_tasks integer NOT NULL DEFAULT 0; -- tasks interrupted (parked until retried)


UPDATE runs r SET
    done_tasks = c.done, failed_tasks = c.failed, cancelled_tasks = c.cancelled, interrupted_tasks = c.interrupted
FROM (
    SELECT run_id,
        count(*) FILTER (WHERE status IN ('completed', 'skipped', 'failed', 'cancelled')) AS done,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
        count(*) FILTER (WHERE status = 'interrupted') AS interrupted
    FROM tasks GROUP BY run_id
) c
WHERE r.id = c.run_id;

-- Room on each page for the counter updates of a run's tasks to stay on
-- the row's page (no index changes for them: a HOT update).
ALTER TABLE runs SET (fillfactor = 85);
