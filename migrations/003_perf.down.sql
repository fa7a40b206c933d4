DELETE FROM task_events e WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = e.run_id);
ALTER TABLE task_events ADD CONSTRAINT task_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE;
DROP INDEX IF EXISTS runs_paused;
