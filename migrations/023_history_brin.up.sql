-- Events are indexed by task with a B-tree only once their day is over.
--
-- The B-tree task_events_task took one entry per event, 29 of the 77
-- B-tree entries a 10-task workflow writes per run (the largest share
-- since 022), for a read the hot path never makes: a task's history, on
-- the site and in the views. Without it, a workflow's drain ran 7-12%
-- faster and wrote 10% less WAL.
--
-- So the partitions that are still written to (today's, the days ahead)
-- carry a BRIN index on task_id instead, task_events_task_brin (minmax-
-- multi: a few bytes per range of 32 pages, nothing per insert into a
-- range not yet summarized). Events are inserted in time order and a
-- task's events are written within its lifetime, so the few ranges a
-- task's events lie in are found by summaries; a task that waits for
-- days is an outlier value that minmax-multi keeps apart. The engine
-- summarizes new ranges every few seconds (store.HistorySummarize),
-- since a range not yet summarized matches every lookup.
--
-- Once a partition's day is over, the engine builds its B-tree by task,
-- <partition>_task on (task_id, id), concurrently and in one sorted pass
-- (store.HistoryPartitionIndex), so reading the history of days past
-- stays a B-tree probe whatever the size of the history. The DEFAULT
-- partition always has one: it takes rows in bulk (copied back when a
-- partition is dropped) and rarely otherwise.
--
-- This migration builds those B-trees for the partitions that are over
-- already (and DEFAULT): on a large history, as long as building that
-- index, under the migration's lock.
DROP INDEX task_events_task;
DO $$
BEGIN
    -- minmax-multi is PostgreSQL 14's; 13 gets plain minmax, whose range
    -- widens to the oldest task with an event in it (slower lookups of
    -- today's events while long waits finish, the same answers).
    IF current_setting('server_version_num')::int >= 140000 THEN
        CREATE INDEX task_events_task_brin ON task_events USING brin (task_id int8_minmax_multi_ops) WITH (pages_per_range = 32);
    ELSE
        CREATE INDEX task_events_task_brin ON task_events USING brin (task_id) WITH (pages_per_range = 32);
    END IF;
END $$;

DO $$
DECLARE
    p  record;
    hi timestamptz;
BEGIN
    FOR p IN
        SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'task_events'::regclass
    LOOP
        hi := (regexp_match(p.bound, 'TO \(''([^'']+)''\)'))[1]::timestamptz;
        IF p.bound = 'DEFAULT' OR hi <= now() THEN
            EXECUTE format('CREATE INDEX %I ON %I (task_id, id)', p.name || '_task', p.name);
        END IF;
    END LOOP;
END $$;
