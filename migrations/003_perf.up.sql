-- Indexes and constraints for the engine's hot statements.

-- Serves the claim query's "run not paused" test: paused runs are few, so
-- the planner looks them up here instead of scanning runs.
CREATE INDEX runs_paused ON runs (id) WHERE paused;

-- Every transition appends an event, and the foreign key to runs made each
-- append look up and key-share-lock the run row (about a tenth of a
-- transition's cost). Events are only ever written from their task's row,
-- whose run_id is itself a foreign key, and the pruner deletes a run's
-- events with the run, so the constraint guarded nothing more.
ALTER TABLE task_events DROP CONSTRAINT task_events_run_id_fkey;
