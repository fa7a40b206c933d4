package benchdb

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// SeedDay writes n finished single-task runs created during the UTC day
// of day (one task each, two events: claimed and completed), with SQL on
// the server, in chunks of chunk runs; progress is told the runs written
// so far after each chunk.
func (d *DB) SeedDay(ctx context.Context, day time.Time, n, chunk int, progress func(done int)) error {
	start := day.UTC().Truncate(24 * time.Hour)
	chunk = max(chunk, 1)
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		// Run g of the day is created at start + g/n of the day.
		_, err := d.db.ExecContext(ctx, d.q(`
WITH r AS (
	INSERT INTO ?schema.run_rows (workflow, status, input, queue, task_count, done_tasks, created_at, started_at, finished_at, updated_at, task_ids)
	SELECT 'prune', 'completed', '{}', 'default', 1, 1, c, c, c + interval '2 seconds', c + interval '2 seconds',
		ARRAY[nextval(pg_get_serial_sequence('?schema.tasks', 'id'))]
	FROM (SELECT $1::timestamptz + (g::float8 / $3) * interval '1 day' AS c FROM generate_series($2::int, $2::int + $4::int - 1) g) x
	RETURNING id, task_ids[1] AS task_id, created_at
), t AS (
	INSERT INTO ?schema.tasks (id, run_id, idx, workflow, name, queue, priority, status, attempt, max_attempts, available_at,
		deps, dependents, pending_deps, created_at, started_at, finished_at, updated_at, output)
	SELECT r.task_id, r.id, 0, 'prune', 'only', 'default', 0, 'completed', 1, 3, r.created_at, '{}', '{}', 0,
		r.created_at, r.created_at + interval '1 second', r.created_at + interval '2 seconds', r.created_at + interval '2 seconds', '{"ok":true}'
	FROM r
	RETURNING id, run_id, created_at
)
INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, at)
SELECT t.run_id, t.id, e.f, e.s, 1, 1, t.created_at + e.d * interval '1 second'
FROM t CROSS JOIN (VALUES ('ready', 'running', 1), ('running', 'completed', 2)) e(f, s, d)`),
			start, done, n, k)
		if err != nil {
			return fmt.Errorf("seed %s, runs %d-%d: %w", start.Format(time.DateOnly), done, done+k, err)
		}
		if progress != nil {
			progress(done + k)
		}
	}
	return nil
}

// WALPosition returns the server's current WAL position.
func (d *DB) WALPosition(ctx context.Context) (string, error) {
	var lsn string
	err := d.db.QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// WALSince returns the WAL bytes written since position lsn.
func (d *DB) WALSince(ctx context.Context, lsn string) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, lsn).Scan(&n)
	return n, err
}

// historyTables are the tables pruning writes to; task_events stands for
// all its partitions.
var historyTables = []string{"run_rows", "tasks", "task_events"}

// SetAutovacuum turns autovacuum on or off for runs, tasks and every
// partition of task_events, so a measurement sees the dead tuples pruning
// left and the vacuum that follows is timed on its own.
func (d *DB) SetAutovacuum(ctx context.Context, on bool) error {
	rows, err := d.db.QueryContext(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND (c.relname IN ('run_rows', 'tasks') OR c.relname LIKE 'task\_events\_%')`, d.schema)
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return err
		}
		names = append(names, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, name := range names {
		if _, err := d.db.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %s.%s SET (autovacuum_enabled = %t)`, d.schema, name, on)); err != nil {
			return fmt.Errorf("autovacuum of %s: %w", name, err)
		}
	}
	return nil
}

// RunsDeleted reads how many rows of runs the statistics system has
// counted as deleted (n_tup_del): a prune's progress, read without
// touching the table. Each backend reports its counts within about a
// second of a transaction's end.
func (d *DB) RunsDeleted(ctx context.Context) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, `SELECT coalesce(sum(n_tup_del), 0)::bigint FROM pg_stat_user_tables
		WHERE schemaname = $1 AND relname = 'run_rows'`, d.schema).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read deleted runs: %w", err)
	}
	return n, nil
}

// DeadTuples returns the dead tuples the statistics count in runs, tasks
// and task_events (its partitions summed), and their total size on disk.
// The statistics reach the server within a second of each statement, so
// it reads until two reads a second apart agree (at most ten seconds).
func (d *DB) DeadTuples(ctx context.Context) (dead map[string]int64, bytes int64, err error) {
	read := func() (map[string]int64, int64, error) {
		out := map[string]int64{}
		var size int64
		rows, err := d.db.QueryContext(ctx, `SELECT CASE WHEN s.relname IN ('run_rows', 'tasks') THEN s.relname ELSE 'task_events' END,
			s.n_dead_tup, pg_total_relation_size(s.relid)
			FROM pg_stat_user_tables s WHERE s.schemaname = $1 AND (s.relname IN ('run_rows', 'tasks') OR s.relname LIKE 'task\_events\_%')`, d.schema)
		if err != nil {
			return nil, 0, err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var n, b int64
			if err := rows.Scan(&name, &n, &b); err != nil {
				return nil, 0, err
			}
			out[name] += n
			size += b
		}
		return out, size, rows.Err()
	}
	prev, _, err := read()
	if err != nil {
		return nil, 0, err
	}
	for range 10 {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(time.Second):
		}
		cur, size, err := read()
		if err != nil {
			return nil, 0, err
		}
		same := true
		for _, t := range historyTables {
			same = same && cur[t] == prev[t]
		}
		if same {
			return cur, size, nil
		}
		prev = cur
	}
	_, size, err := read()
	return prev, size, err
}

// VacuumHistory runs VACUUM on runs, tasks and task_events (every
// partition), the work autovacuum would do after pruning; with analyze,
// VACUUM ANALYZE (autoanalyze is off with autovacuum, and the pruning
// statements need the tables' statistics to be planned as in production).
func (d *DB) VacuumHistory(ctx context.Context, analyze bool) error {
	var qualified []string
	for _, t := range historyTables {
		qualified = append(qualified, d.schema+"."+t)
	}
	cmd := "VACUUM "
	if analyze {
		cmd = "VACUUM ANALYZE "
	}
	_, err := d.db.ExecContext(ctx, cmd+strings.Join(qualified, ", "))
	return err
}

// PruneByDelete is the pruner as it was before task_events was
// partitioned (store.RunPrune up to migration 017): runs finished more
// than olderThan ago are deleted batch at a time, each statement with
// every event, step, signal and log line of their tasks (the tasks go by
// cascade). It returns how many runs it deleted. The events are matched
// as the store matches them since (= ANY of an array, so each partition's
// index by task is probed; IN would hash every partition whole), and each
// batch starts after the last run of the one before, as RunPrune's do:
// the two ways differ only in how the events go.
func (d *DB) PruneByDelete(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	var total int64
	ms := olderThan.Milliseconds()
	var at time.Time // the last run deleted (zero: before every run)
	var id int64
	for {
		var n int64
		var lastAt *time.Time
		var lastID *int64
		err := d.db.QueryRowContext(ctx, d.q(`
WITH old AS (
	SELECT id, created_at FROM ?schema.run_rows
	WHERE created_at < now() - $1 * interval '1 millisecond' AND (created_at, id) > ($3::timestamptz, $4::bigint)
		AND finished_at < now() - $1 * interval '1 millisecond'
		AND (unique_until IS NULL OR unique_until <= now())
	ORDER BY created_at, id LIMIT $2
), ot AS (
	SELECT ARRAY(SELECT unnest(r.task_ids) FROM ?schema.run_rows r WHERE r.id IN (SELECT id FROM old)) AS ids
), e AS (
	DELETE FROM ?schema.task_events WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), st AS (
	DELETE FROM ?schema.task_steps WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), sg AS (
	DELETE FROM ?schema.task_signals WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), lg AS (
	DELETE FROM ?schema.task_logs WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), r AS (
	DELETE FROM ?schema.run_rows WHERE id IN (SELECT id FROM old)
	RETURNING id
)
SELECT (SELECT count(*) FROM r), l.created_at, l.id
FROM (SELECT 1) one LEFT JOIN (SELECT created_at, id FROM old ORDER BY created_at DESC, id DESC LIMIT 1) l ON true`), ms, batch, at, id).Scan(&n, &lastAt, &lastID)
		if err != nil {
			return total, fmt.Errorf("prune by delete: %w", err)
		}
		total += n
		if n < int64(batch) || lastAt == nil || lastID == nil {
			return total, nil
		}
		at, id = *lastAt, *lastID
	}
}
