-- Flow control: per-key concurrency limits, rate limits and fair claiming.
--
-- A task declared with a concurrency limit or a rate limit carries the key
-- it is limited by: the kind ('c' concurrency, 'r' rate), the group and the
-- key value read from the run input, joined by U+001F (which a group name
-- cannot contain). The limit itself lives on the key's flow_keys row, so
-- that tasks of several workflows can share it.

ALTER TABLE tasks
    ADD COLUMN conc_key text,                           -- concurrency key ('c' U+001F group U+001F value), NULL = none
    ADD COLUMN rate_key text,                           -- rate-limit key ('r' U+001F group U+001F value), NULL = none
    ADD COLUMN fair_key text GENERATED ALWAYS AS (coalesce(conc_key, rate_key)) STORED; -- key claimed round-robin

-- flow_keys: one row per key, written at enqueue (the limit) and by the
-- claims and resumes of its tasks. A claim or a resume locks the key's
-- row and checks the room it leaves on its latest version: check and
-- move are one atomic step cluster-wide (see store/flow.go). A task
-- leaving running writes no key row.
CREATE TABLE flow_keys (
    key         text PRIMARY KEY,                       -- as in tasks.conc_key / tasks.rate_key
    max_running integer CHECK (max_running >= 1),       -- concurrency: at most this many running at once
    claims      bigint  NOT NULL DEFAULT 0,             -- concurrency: moves into running so far (claims and resumes)
    rate_limit  integer CHECK (rate_limit >= 1),        -- rate: at most this many starts ...
    rate_per_ms bigint  CHECK (rate_per_ms >= 1),       -- ... in any window of this many milliseconds
    starts      timestamptz[] NOT NULL DEFAULT '{}',    -- rate: the starts of about the last two windows (database clock), oldest first
    updated_at  timestamptz NOT NULL DEFAULT now()      -- last change
) WITH (fillfactor = 50);

-- Unkeyed ready tasks are claimed in priority order from tasks_claim;
-- keyed ones per key from tasks_claim_keyed, round-robin across keys.
DROP INDEX tasks_claim;
CREATE INDEX tasks_claim ON tasks (queue, priority, available_at, id) WHERE status = 'ready' AND fair_key IS NULL;
CREATE INDEX tasks_claim_keyed ON tasks (queue, fair_key, priority, available_at, id) WHERE status = 'ready' AND fair_key IS NOT NULL;
-- Running tasks per concurrency key, for the SQL check of the bound (an
-- entry only for keyed running tasks).
CREATE INDEX tasks_conc_running ON tasks (conc_key) WHERE status = 'running' AND conc_key IS NOT NULL;

-- Queue depth counts ready tasks through both claim indexes.
CREATE OR REPLACE VIEW cairn_queue_depth AS
    SELECT q.name AS queue, q.paused, q.max_running,
           r.ready, r.available, h.running, h.deferred, r.oldest_ready_at
    FROM queues q
    CROSS JOIN LATERAL (
        SELECT count(*) AS ready,
               count(*) FILTER (WHERE t.available_at <= now()) AS available,
               min(t.available_at) AS oldest_ready_at
        FROM (
            SELECT available_at FROM tasks WHERE queue = q.name AND status = 'ready' AND fair_key IS NULL
            UNION ALL
            SELECT available_at FROM tasks WHERE queue = q.name AND status = 'ready' AND fair_key IS NOT NULL
        ) t
    ) r
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE t.status = 'running') AS running,
               count(*) FILTER (WHERE t.status = 'deferred') AS deferred
        FROM tasks t WHERE t.queue = q.name AND t.status IN ('running', 'deferred')
    ) h;

-- Per-key flow state for monitoring: running tasks against the limit
-- (counted from the tasks themselves, so "running <= max_running" is the
-- SQL check of the concurrency bound), and the rate limit's starts in the
-- current window.
CREATE VIEW cairn_flow_keys AS
    SELECT split_part(k.key, chr(31), 1) AS kind,
           split_part(k.key, chr(31), 2) AS grp,
           substr(k.key, length(split_part(k.key, chr(31), 1)) + length(split_part(k.key, chr(31), 2)) + 3) AS key_value,
           k.max_running,
           (SELECT count(*) FROM tasks t WHERE t.conc_key = k.key AND t.status = 'running') AS running,
           k.rate_limit,
           k.rate_per_ms,
           (SELECT count(*) FROM unnest(k.starts) s WHERE s > now() - k.rate_per_ms * interval '1 millisecond') AS starts_in_window,
           (SELECT count(*) FROM tasks t WHERE t.fair_key = k.key AND t.status = 'ready') AS ready
    FROM flow_keys k;
