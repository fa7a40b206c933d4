-- Exact task counts per workflow, queue and state, without counting the
-- tasks table: statement-level triggers append each statement's net change
-- to task_count_deltas (insert-only, so concurrent transitions never wait
-- on one another), and the engine folds the deltas into task_counts every
-- second. cairn_task_counts adds both, so it is exact in every snapshot.

CREATE TABLE task_counts (
    workflow text   NOT NULL,                           -- workflow name
    queue    text   NOT NULL,                           -- queue name
    status   text   NOT NULL,                           -- task state
    tasks    bigint NOT NULL,                           -- tasks in that state (folded deltas)
    PRIMARY KEY (workflow, queue, status)
);

CREATE TABLE task_count_deltas (
    workflow text   NOT NULL,                           -- workflow name
    queue    text   NOT NULL,                           -- queue name
    status   text   NOT NULL,                           -- task state
    tasks    bigint NOT NULL                            -- net change by one statement
);

CREATE FUNCTION task_counts_delta() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_count_deltas (workflow, queue, status, tasks)
        SELECT workflow, queue, status, count(*) FROM new_rows GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO task_count_deltas (workflow, queue, status, tasks)
        SELECT workflow, queue, status, -count(*) FROM old_rows GROUP BY 1, 2, 3;
    ELSE
        INSERT INTO task_count_deltas (workflow, queue, status, tasks)
        SELECT workflow, queue, status, sum(n) FROM (
            SELECT workflow, queue, status, 1 AS n FROM new_rows
            UNION ALL
            SELECT workflow, queue, status, -1 FROM old_rows
        ) x GROUP BY 1, 2, 3 HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION task_counts_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_count_deltas;
    DELETE FROM task_counts;
    RETURN NULL;
END $$;

-- The functions run with the caller's search_path: pin them to this schema.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION task_counts_delta() SET search_path = %I, pg_catalog', current_schema());
    EXECUTE format('ALTER FUNCTION task_counts_truncate() SET search_path = %I, pg_catalog', current_schema());
END $$;

CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION task_counts_delta();
CREATE TRIGGER tasks_count_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION task_counts_delta();
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION task_counts_delta();
CREATE TRIGGER tasks_count_truncate AFTER TRUNCATE ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_truncate();

INSERT INTO task_counts (workflow, queue, status, tasks)
SELECT workflow, queue, status, count(*) FROM tasks GROUP BY 1, 2, 3;

CREATE OR REPLACE VIEW cairn_task_counts AS
    SELECT workflow, queue, status, sum(tasks)::bigint AS tasks
    FROM (
        SELECT workflow, queue, status, tasks FROM task_counts
        UNION ALL
        SELECT workflow, queue, status, tasks FROM task_count_deltas
    ) c
    GROUP BY workflow, queue, status
    HAVING sum(tasks) <> 0;
