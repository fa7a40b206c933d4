ALTER TABLE runs DROP COLUMN live_key;
ALTER TABLE runs DROP COLUMN unique_until;
ALTER TABLE runs ADD COLUMN live_key text GENERATED ALWAYS AS (
    CASE WHEN status IN ('pending', 'running', 'paused', 'interrupted') THEN idempotency_key END) STORED; -- idempotency_key while the run is live, else NULL
CREATE UNIQUE INDEX runs_live_key ON runs (live_key) WHERE live_key IS NOT NULL;
