-- task_events is range-partitioned by time (at), one partition per UTC
-- day named task_events_YYYYMMDD, plus a DEFAULT partition that takes any
-- row no daily partition covers, so an insert never fails for lack of a
-- partition. The engine creates the partitions of the next days ahead and,
-- with a retention set, drops whole partitions once they are older than
-- it (first copying back the events of runs still kept: they land in the
-- DEFAULT partition). Each partition carries the parent's indexes: by
-- task (task_id, id) and a BRIN on at.
--
-- An existing installation's rows are not rewritten: the old table is
-- attached as one partition, task_events_migrated, for everything before
-- tomorrow (UTC). That costs one read of the table (PostgreSQL checks the
-- range of the rows it attaches) and keeps its indexes as the partition's
-- (they match the parent's, so ATTACH adopts them instead of building
-- new ones); copying every row into daily partitions would instead write
-- the whole history again, its indexes and as much WAL, under an
-- exclusive lock. task_events_migrated ages out with the retention like
-- any partition. An empty table (a new installation) is simply replaced.
ALTER TABLE task_events RENAME TO task_events_migrated;
ALTER INDEX task_events_task RENAME TO task_events_migrated_task;
ALTER INDEX task_events_at RENAME TO task_events_migrated_at;

CREATE TABLE task_events (
    id          bigint      NOT NULL DEFAULT nextval('task_events_id_seq'), -- event id, increasing in commit-ish order
    run_id      bigint      NOT NULL,                   -- run of the task
    task_id     bigint      NOT NULL,                   -- task that moved (deleted with its run)
    from_status text,                                   -- NULL when the task was created
    to_status   text        NOT NULL,                   -- new state
    worker_id   bigint,                                 -- worker that made or held the transition
    attempt     integer     NOT NULL DEFAULT 0,         -- attempt number at the transition
    at          timestamptz NOT NULL DEFAULT now(),     -- transaction time of the transition
    error       text,                                   -- error of a failed attempt, reason of a rescue
    detail      jsonb                                   -- extra: stack, attempt log, cancel reason
) PARTITION BY RANGE (at);
ALTER SEQUENCE task_events_id_seq OWNED BY task_events.id;
CREATE INDEX task_events_task ON task_events (task_id, id);
CREATE INDEX task_events_at ON task_events USING brin (at);
CREATE TABLE task_events_default PARTITION OF task_events DEFAULT;

-- The view read the old table (views follow the table, not its name):
-- read the new one.
CREATE OR REPLACE VIEW cairn_task_attempts AS
    SELECT task_id, run_id, attempt, worker_id, to_status AS outcome, at AS ended_at, error, detail
    FROM task_events
    WHERE from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred');


DO $$
DECLARE
    today    timestamptz := date_trunc('day', now(), 'UTC');
    tomorrow timestamptz := today + interval '1 day';
    first    timestamptz := today;
    d        timestamptz;
BEGIN
    IF EXISTS (SELECT 1 FROM task_events_migrated) THEN
        first := tomorrow;
    END IF;
    -- Today (for an empty table) and the next three days.
    d := first;
    WHILE d <= today + interval '3 days' LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF task_events FOR VALUES FROM (%L) TO (%L)',
            'task_events_' || to_char(d AT TIME ZONE 'UTC', 'YYYYMMDD'), d, d + interval '1 day');
        d := d + interval '1 day';
    END LOOP;
    IF first = today THEN
        DROP TABLE task_events_migrated;
    ELSE
        -- Rows stamped tomorrow or later (a clock ahead) go to their
        -- partition; the BRIN on at finds them without reading the table.
        WITH moved AS (DELETE FROM task_events_migrated WHERE at >= tomorrow RETURNING *)
        INSERT INTO task_events SELECT * FROM moved;
        EXECUTE format('ALTER TABLE task_events ATTACH PARTITION task_events_migrated FOR VALUES FROM (MINVALUE) TO (%L)', tomorrow);
    END IF;
END $$;
