package benchdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// This file holds the queries of the bloat and history scenarios: a
// session that holds a snapshot open, the dead tuples of the tasks table
// and its claim index, and a finished history seeded with SQL.

// Snapshot is an open REPEATABLE READ transaction: while it lasts, no
// row version that it could see can be removed by vacuum (it holds the
// xmin horizon back), as a long report, a stuck session or a replica
// with hot_standby_feedback would.
type Snapshot struct {
	tx *sql.Tx
}

// HoldSnapshot begins a REPEATABLE READ transaction and takes its
// snapshot by reading one task row. Release ends it.
func (d *DB) HoldSnapshot(ctx context.Context) (*Snapshot, error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("begin the snapshot transaction: %w", err)
	}
	var one int
	err = tx.QueryRowContext(ctx, d.q(`SELECT 1 FROM ?schema.tasks LIMIT 1`)).Scan(&one)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		_ = tx.Rollback()
		return nil, fmt.Errorf("take the snapshot: %w", err)
	}
	return &Snapshot{tx: tx}, nil
}

// Release commits the snapshot's transaction.
func (s *Snapshot) Release() error {
	if err := s.tx.Commit(); err != nil {
		return fmt.Errorf("release the snapshot: %w", err)
	}
	return nil
}

// TableStats is what the statistics collector says of a table.
type TableStats struct {
	Live, Dead  int64 // n_live_tup, n_dead_tup (estimates)
	AutoVacuums int64 // autovacuum_count
	Bytes       int64 // size of the heap
}

// TableStats reads pg_stat_user_tables for table of the engine schema.
func (d *DB) TableStats(ctx context.Context, table string) (TableStats, error) {
	var t TableStats
	// Summed over the table and its partitions, if any (task_events is
	// partitioned by day; the parent itself holds nothing).
	err := d.db.QueryRowContext(ctx, `SELECT coalesce(sum(s.n_live_tup), 0)::bigint, coalesce(sum(s.n_dead_tup), 0)::bigint,
		coalesce(sum(s.autovacuum_count), 0)::bigint, coalesce(sum(pg_relation_size(p.relid)), 0)::bigint
		FROM (SELECT format('%I.%I', $1::text, $2::text)::regclass AS relid
			UNION SELECT relid FROM pg_partition_tree(format('%I.%I', $1::text, $2::text)::regclass)) p
		LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid`, d.schema, table).
		Scan(&t.Live, &t.Dead, &t.AutoVacuums, &t.Bytes)
	if err != nil {
		return t, fmt.Errorf("read the statistics of %s: %w", table, err)
	}
	return t, nil
}

// XminAge returns the age, in transactions, of the oldest snapshot of a
// session of this database: how far it holds the vacuum horizon back.
func (d *DB) XminAge(ctx context.Context) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, `SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity
		WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// EnablePgstattuple creates the pgstattuple extension in the database
// (PostgreSQL's contrib; creating it needs a superuser). It reports
// whether it is available.
func (d *DB) EnablePgstattuple(ctx context.Context) bool {
	_, err := d.db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`)
	return err == nil
}

// IndexStats describes an index.
type IndexStats struct {
	Bytes int64 // size on disk
	// Entries and DeadEntries come from pgstattuple (-1 without it):
	// every entry, and those marked dead (known dead to every snapshot).
	Entries, DeadEntries int64
}

// IndexStats measures index of the engine schema; with stattuple it
// scans it with pgstattuple (see EnablePgstattuple).
func (d *DB) IndexStats(ctx context.Context, index string, stattuple bool) (IndexStats, error) {
	s := IndexStats{Entries: -1, DeadEntries: -1}
	if !identRe.MatchString(index) {
		return s, fmt.Errorf("bad index name %q", index)
	}
	name := d.schema + "." + index
	if stattuple {
		err := d.db.QueryRowContext(ctx, `SELECT table_len, tuple_count, dead_tuple_count FROM pgstattuple($1::regclass)`, name).
			Scan(&s.Bytes, &s.Entries, &s.DeadEntries)
		if err != nil {
			return s, fmt.Errorf("pgstattuple %s: %w", name, err)
		}
		return s, nil
	}
	if err := d.db.QueryRowContext(ctx, `SELECT pg_relation_size($1::regclass)`, name).Scan(&s.Bytes); err != nil {
		return s, fmt.Errorf("size of %s: %w", name, err)
	}
	return s, nil
}

// CountReady counts the ready tasks with a flow-control key (keyed), or
// without one: the rows tasks_claim_keyed, or tasks_claim, should hold.
func (d *DB) CountReady(ctx context.Context, keyed bool) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, d.q(`SELECT count(*) FROM ?schema.tasks WHERE status = 'ready' AND (fair_key IS NOT NULL) = $1`), keyed).Scan(&n)
	return n, err
}

// FinishedParams is one chunk of a seeded finished history: one-task runs
// From+1 .. From+Count of Total, created over the Span before now in id
// order, each completed, with three events (created, claimed, completed).
type FinishedParams struct {
	From, Count, Total int
	Span               time.Duration
	Workflow, Task     string
	Queue              string
}

// SeedFinished writes one chunk of finished one-task runs, their tasks
// and their events in one statement (not through the engine).
func (d *DB) SeedFinished(ctx context.Context, p FinishedParams) error {
	if p.Count <= 0 || p.Total <= 0 {
		return fmt.Errorf("seed finished runs: count %d and total %d must be positive", p.Count, p.Total)
	}
	_, err := d.db.ExecContext(ctx, d.q(`WITH r AS (
		INSERT INTO ?schema.run_rows (workflow, status, input, queue, task_count, done_tasks, created_at, started_at, finished_at, updated_at, task_ids)
		SELECT $4, 'completed', '{}', $6, 1, 1, c, c + interval '2 ms', c + interval '3 ms', c + interval '3 ms',
			ARRAY[nextval(pg_get_serial_sequence('?schema.tasks', 'id'))]
		FROM (SELECT now() - ($3 - g)::float8 / $3 * ($7 * interval '1 second') AS c
			FROM generate_series($1::int + 1, $1::int + $2::int) g) x
		RETURNING id, task_ids[1] AS task_id, workflow, queue, created_at, started_at, finished_at
	), t AS (
		INSERT INTO ?schema.tasks (id, run_id, idx, workflow, name, queue, status, attempt, available_at,
			created_at, started_at, finished_at, updated_at)
		SELECT task_id, id, 0, workflow, $5, queue, 'completed', 1, created_at, created_at, started_at, finished_at, finished_at FROM r
		RETURNING id, run_id, created_at, started_at, finished_at
	)
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, at)
	SELECT t.run_id, t.id, e.f, e.s, e.w, e.a, e.at FROM t CROSS JOIN LATERAL (VALUES
		(NULL::text, 'ready', NULL::bigint, 0, t.created_at),
		('ready', 'running', 1, 1, t.started_at),
		('running', 'completed', 1, 1, t.finished_at)) e(f, s, w, a, at)`),
		p.From, p.Count, p.Total, p.Workflow, p.Task, p.Queue, p.Span.Seconds())
	if err != nil {
		return fmt.Errorf("seed finished runs %d-%d: %w", p.From+1, p.From+p.Count, err)
	}
	return nil
}

// VacuumAnalyze vacuums and analyzes the engine's main tables, as
// autovacuum would have after a history was written over days.
func (d *DB) VacuumAnalyze(ctx context.Context) error {
	for _, t := range []string{"run_rows", "tasks", "task_events"} {
		if _, err := d.db.ExecContext(ctx, d.q(`VACUUM ANALYZE ?schema.`+t)); err != nil {
			return fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	return nil
}

// MaxTaskID returns the highest task id (0 without tasks).
func (d *DB) MaxTaskID(ctx context.Context) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, d.q(`SELECT coalesce(max(id), 0) FROM ?schema.tasks`)).Scan(&n)
	return n, err
}

// EventWindowAfter is EventWindow over the tasks with ids above floor
// only (a seeded history's events left out).
func (d *DB) EventWindowAfter(ctx context.Context, floor int64) (Window, error) {
	var w Window
	var first, last sql.NullTime
	err := d.db.QueryRowContext(ctx, d.q(`SELECT min(at) FILTER (WHERE from_status = 'ready' AND to_status = 'running'),
		max(at) FILTER (WHERE to_status = 'completed'), count(*) FILTER (WHERE to_status = 'completed')
		FROM ?schema.task_events WHERE task_id > $1`), floor).Scan(&first, &last, &w.Completed)
	w.First, w.Last = first.Time, last.Time
	return w, err
}

// CountCompletedAfter counts the tasks with ids above floor that moved
// to completed, from their events.
func (d *DB) CountCompletedAfter(ctx context.Context, floor int64) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, d.q(`SELECT count(*) FROM ?schema.task_events WHERE task_id > $1 AND to_status = 'completed'`), floor).Scan(&n)
	return n, err
}
