-- Uniqueness over a window (engine.WithUniqueFor): a run enqueued with a
-- key and a window holds its key until unique_until, whatever its state.
--
-- The window lives on the run row and in the one unique index that already
-- guards live keys, so both rules are checked by one index entry: an enqueue
-- that finds the key held waits for, or returns, its holder; no second
-- structure can disagree with the first under concurrent enqueues. A
-- finished run keeps its key in live_key until an enqueue of that key finds
-- its window passed and clears unique_until (the enqueue path, never a
-- transition). unique_until is set at insert and changes only then, so a
-- windowed run's status updates change no indexed value and stay HOT.
ALTER TABLE runs ADD COLUMN unique_until timestamptz; -- WithUniqueFor: the key stays held until then, in any state; NULL: only while live
ALTER TABLE runs DROP COLUMN live_key; -- drops runs_live_key
ALTER TABLE runs ADD COLUMN live_key text GENERATED ALWAYS AS (
    CASE WHEN status IN ('pending', 'running', 'paused', 'interrupted') OR unique_until IS NOT NULL
    THEN idempotency_key END) STORED; -- idempotency_key while the run is live or its window holds, else NULL
CREATE UNIQUE INDEX runs_live_key ON runs (live_key) WHERE live_key IS NOT NULL;
