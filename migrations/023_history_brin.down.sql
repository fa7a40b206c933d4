-- Back to one B-tree by task on every partition (built anew, so the
-- partitions' indexes get the names PostgreSQL gave them before).
DO $$
DECLARE
    p record;
BEGIN
    FOR p IN
        SELECT c.relname AS name
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'task_events'::regclass
    LOOP
        EXECUTE format('DROP INDEX IF EXISTS %I', p.name || '_task');
    END LOOP;
END $$;
DROP INDEX task_events_task_brin;
CREATE INDEX task_events_task ON task_events (task_id, id);
