-- A run someone waits for (Engine.WaitRun, GET /api/runs/{id}?wait=, cairn
-- runs wait) announces its end: the waiters are woken by a control
-- NOTIFY {"k": "run", "r": [id]} instead of polling.
--
-- run_rows.awaited is set by the first wait on a run that has not ended,
-- which first makes a fast run (migration 019) an ordinary one, so that
-- its transitions write the row. A trigger on the row's status then
-- notifies once the run is completed, failed, cancelled or interrupted.
-- Runs nobody waits for pay the trigger's WHEN test only (it is evaluated
-- without calling the function).
ALTER TABLE run_rows ADD COLUMN awaited boolean NOT NULL DEFAULT false;

CREATE FUNCTION cairn_run_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_control',
        json_build_object('k', 'run', 'r', json_build_array(NEW.id))::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER run_rows_awaited AFTER UPDATE OF status ON run_rows
    FOR EACH ROW
    WHEN (NEW.awaited AND NEW.status IN ('completed', 'failed', 'cancelled', 'interrupted')
        AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION cairn_run_ended();
