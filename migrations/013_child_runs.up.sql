-- Child runs: a run spawned by a task (TaskHandle.SpawnRun) records its
-- parent task. The column is written once, at insert, and never changes,
-- so its index costs no transition anything.
ALTER TABLE runs ADD COLUMN parent_task_id bigint; -- task that spawned the run (SpawnRun); NULL for other runs
CREATE INDEX runs_parent_task ON runs (parent_task_id) WHERE parent_task_id IS NOT NULL;

-- When a child run finishes (completed, failed or cancelled), wake its
-- parent task: a control NOTIFY (kind "signal") names it, so a parent
-- parked in AwaitRuns re-checks its children at once, in whichever engine
-- holds it. A trigger catches every statement that finishes a run (task
-- transitions, cancels, recounts); its WHEN clause is evaluated without
-- calling the function, so runs without a parent pay only that test.
CREATE FUNCTION cairn_wake_parent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_control',
        json_build_object('k', 'signal', 't', json_build_array(NEW.parent_task_id))::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_wake_parent AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.parent_task_id IS NOT NULL AND NEW.status IN ('completed', 'failed', 'cancelled')
        AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION cairn_wake_parent();
