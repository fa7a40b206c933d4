ALTER TABLE task_events ADD PRIMARY KEY (id);
CREATE INDEX task_events_run ON task_events (run_id, id);
ALTER TABLE runs SET (fillfactor = 85);
DROP INDEX runs_live_key;
ALTER TABLE runs DROP COLUMN live_key;
CREATE UNIQUE INDEX runs_idempotency_live ON runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running', 'paused', 'interrupted');
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_status_created ON runs (status, created_at DESC, id DESC);
