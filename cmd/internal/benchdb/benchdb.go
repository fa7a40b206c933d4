// Package benchdb holds the SQL of the benchmark command (cmd/bench) that
// is not the engine's own: creating and dropping scratch databases,
// measuring what the engine did from task_events, seeding large data sets
// directly, and the site's read queries when the store offers none. It
// is the benchmark's own SQL, kept here rather than in store, whose
// statements are the engine's.
package benchdb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
)

// connectTimeout bounds the check that the server answers.
const connectTimeout = 30 * time.Second

var identRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Server is a connection to a PostgreSQL server's maintenance database.
type Server struct {
	db  *sql.DB
	url string
}

// Connect opens the maintenance connection at url.
func Connect(ctx context.Context, url string) (*Server, error) {
	db, err := store.Open(ctx, url, connectTimeout) // its error names the URL, password masked
	if err != nil {
		return nil, fmt.Errorf("connect %w", err)
	}
	db.SetMaxOpenConns(2)
	return &Server{db: db, url: url}, nil
}

// Close closes the maintenance connection.
func (s *Server) Close() error { return s.db.Close() }

// CreateDatabase creates database name (dropping a leftover of that name)
// and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	if !identRe.MatchString(name) {
		return "", fmt.Errorf("bad database name %q", name)
	}
	if _, err := s.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop old database %s: %w", name, err)
	}
	if _, err := s.db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return WithDatabase(s.url, name), nil
}

// DropDatabase drops database name, disconnecting its sessions.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if !identRe.MatchString(name) {
		return fmt.Errorf("bad database name %q", name)
	}
	_, err := s.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	return err
}

// Describe returns the server version and the settings that matter for
// throughput and durability.
func (s *Server) Describe(ctx context.Context) (version string, settings map[string]string, err error) {
	if err := s.db.QueryRowContext(ctx, "SHOW server_version").Scan(&version); err != nil {
		return "", nil, err
	}
	names := []string{"fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers",
		"max_wal_size", "checkpoint_timeout", "wal_compression", "max_connections", "shared_preload_libraries"}
	rows, err := s.db.QueryContext(ctx, `SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY($1::text[])`,
		"{"+strings.Join(names, ",")+"}")
	if err != nil {
		return "", nil, err
	}
	defer rows.Close()
	settings = map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return "", nil, err
		}
		settings[k] = v
	}
	return version, settings, rows.Err()
}

// WithDatabase returns the URL u pointed at database name.
func WithDatabase(u, name string) string {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return u + " dbname=" + name
	}
	p.Path = "/" + name
	return p.String()
}

// DB runs the bench's queries on one migrated database.
type DB struct {
	db     *sql.DB
	schema string
}

// New returns the bench queries over db for the engine schema.
func New(db *sql.DB, schema string) (*DB, error) {
	if !identRe.MatchString(schema) {
		return nil, fmt.Errorf("bad schema %q", schema)
	}
	return &DB{db: db, schema: schema}, nil
}

func (d *DB) q(query string) string { return strings.ReplaceAll(query, "?schema", d.schema) }

// Window is the span of the engine's work as task_events recorded it.
type Window struct {
	First     time.Time // earliest ready -> running
	Last      time.Time // latest move to completed
	Completed int64     // tasks moved to completed
}

// Seconds returns the window's length.
func (w Window) Seconds() float64 { return w.Last.Sub(w.First).Seconds() }

// EventWindow measures the first claim and the last completion.
func (d *DB) EventWindow(ctx context.Context) (Window, error) {
	var w Window
	var first, last sql.NullTime
	err := d.db.QueryRowContext(ctx, d.q(`SELECT
		(SELECT min(at) FROM ?schema.task_events WHERE to_status = 'running' AND from_status = 'ready'),
		(SELECT max(at) FROM ?schema.task_events WHERE to_status = 'completed'),
		(SELECT count(*) FROM ?schema.task_events WHERE to_status = 'completed')`)).Scan(&first, &last, &w.Completed)
	w.First, w.Last = first.Time, last.Time
	return w, err
}

// Analyze refreshes the planner statistics of the engine's tables, as
// autovacuum would shortly after a bulk insert.
func (d *DB) Analyze(ctx context.Context) error {
	_, err := d.db.ExecContext(ctx, d.q(`ANALYZE ?schema.run_rows, ?schema.tasks, ?schema.task_events`))
	return err
}

// CountStatus returns how many tasks are in status.
func (d *DB) CountStatus(ctx context.Context, status string) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, d.q(`SELECT count(*) FROM ?schema.tasks WHERE status = $1`), status).Scan(&n)
	return n, err
}

// DeferSpan returns the times of the first and the last claim (ready ->
// running) and of the last park (running -> deferred) recorded in
// task_events.
func (d *DB) DeferSpan(ctx context.Context) (firstClaim, lastClaim, lastDeferred time.Time, err error) {
	var c, l, p sql.NullTime
	err = d.db.QueryRowContext(ctx, d.q(`SELECT
		(SELECT min(at) FROM ?schema.task_events WHERE from_status = 'ready' AND to_status = 'running'),
		(SELECT max(at) FROM ?schema.task_events WHERE from_status = 'ready' AND to_status = 'running'),
		(SELECT max(at) FROM ?schema.task_events WHERE from_status = 'running' AND to_status = 'deferred')`)).Scan(&c, &l, &p)
	return c.Time, l.Time, p.Time, err
}

// CountByStatus returns task counts by status.
func (d *DB) CountByStatus(ctx context.Context) (map[string]int64, error) {
	rows, err := d.db.QueryContext(ctx, d.q(`SELECT status, count(*) FROM ?schema.tasks GROUP BY status`))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// Claims counts ready -> running events: in total, and the tasks that
// were claimed more than once.
func (d *DB) Claims(ctx context.Context) (total, duplicated int64, err error) {
	err = d.db.QueryRowContext(ctx, d.q(`SELECT coalesce(sum(n), 0), count(*) FILTER (WHERE n > 1) FROM (
		SELECT task_id, count(*) AS n FROM ?schema.task_events WHERE from_status = 'ready' AND to_status = 'running' GROUP BY task_id) x`)).
		Scan(&total, &duplicated)
	return total, duplicated, err
}

// SlotViolations counts workers that, right now, run more tasks than
// their slots.
func (d *DB) SlotViolations(ctx context.Context) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, d.q(`SELECT count(*) FROM ?schema.cairn_worker_slots WHERE running > slots`)).Scan(&n)
	return n, err
}

// EnableStatements creates pg_stat_statements in the database (the server
// must preload it) and resets it. It reports whether it is available.
func (d *DB) EnableStatements(ctx context.Context) bool {
	if _, err := d.db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return false
	}
	_, err := d.db.ExecContext(ctx, `SELECT pg_stat_statements_reset()`)
	return err == nil
}

// Statement is one row of pg_stat_statements.
type Statement struct {
	Calls    int64
	Rows     int64
	Plans    int64   // times planned (counted with pg_stat_statements.track_planning on)
	Buffers  int64   // shared buffers hit and read: the work done, steadier than the times on a noisy machine
	PlanMs   float64 // total planning time
	ExecMs   float64 // total execution time
	MeanMs   float64 // mean execution time
	Query    string  // first line(s), shortened
	WALBytes int64
}

// TopStatements returns the statements of this database with the largest
// total (planning + execution) time.
func (d *DB) TopStatements(ctx context.Context, limit int) ([]Statement, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT calls, rows, plans, shared_blks_hit + shared_blks_read, total_plan_time, total_exec_time, mean_exec_time, wal_bytes::bigint,
		regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_plan_time + total_exec_time DESC LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var s Statement
		if err := rows.Scan(&s.Calls, &s.Rows, &s.Plans, &s.Buffers, &s.PlanMs, &s.ExecMs, &s.MeanMs, &s.WALBytes, &s.Query); err != nil {
			return nil, err
		}
		if len(s.Query) > 160 {
			s.Query = s.Query[:160] + "…"
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// SeedParams sizes a seeded data set.
type SeedParams struct {
	Tasks       int           // task rows in total
	TasksPerRun int           // tasks of each run (a chain)
	Span        time.Duration // created_at spread over the last Span
}

// Seed writes runs, tasks and their events directly with SQL (not through
// the engine): a realistic finished history with a few failed, running
// and waiting runs. It returns the rows written per table.
func (d *DB) Seed(ctx context.Context, p SeedParams) (runs, tasks, events int64, err error) {
	per := max(p.TasksPerRun, 1)
	nRuns := p.Tasks / per
	span := p.Span.Seconds()
	stmts := []string{
		// 94% completed, 3% failed, 2% running, 1% pending.
		`INSERT INTO ?schema.run_rows (workflow, status, input, queue, task_count, created_at, started_at, finished_at, updated_at)
		SELECT 'wf_' || (g % 7), st, jsonb_build_object('n', g), CASE WHEN g % 5 = 0 THEN 'bulk' ELSE 'default' END, $2,
			c, c + interval '1 second', CASE WHEN st IN ('completed', 'failed') THEN c + interval '5 seconds' END, c + interval '5 seconds'
		FROM (SELECT g, now() - ($1 - g)::float8 / $1 * ($3 * interval '1 second') AS c,
			CASE WHEN g % 100 < 94 THEN 'completed' WHEN g % 100 < 97 THEN 'failed' WHEN g % 100 < 99 THEN 'running' ELSE 'pending' END AS st
			FROM generate_series(1, $1) g) x`,
		`INSERT INTO ?schema.tasks (run_id, idx, workflow, name, queue, priority, status, attempt, max_attempts, available_at,
			deps, dependents, pending_deps, created_at, started_at, finished_at, updated_at, last_error, worker_id, lease_expires_at, output)
		SELECT r.id, i, r.workflow, 'step_' || i, r.queue, 0,
			ts, CASE WHEN ts IN ('ready', 'not_started') THEN 0 ELSE 1 END, 3, r.created_at,
			CASE WHEN i = 0 THEN '{}'::int[] ELSE ARRAY[i - 1] END, CASE WHEN i = $1 - 1 THEN '{}'::int[] ELSE ARRAY[i + 1] END,
			CASE WHEN ts = 'not_started' THEN 1 ELSE 0 END,
			r.created_at, r.created_at + i * interval '1 second',
			CASE WHEN ts IN ('completed', 'failed', 'skipped') THEN r.created_at + (i + 1) * interval '1 second' END,
			r.created_at + (i + 1) * interval '1 second',
			CASE WHEN ts = 'failed' THEN 'boom' END, CASE WHEN ts = 'running' THEN 1 END,
			CASE WHEN ts = 'running' THEN now() + interval '1 hour' END,
			CASE WHEN ts = 'completed' THEN '{"ok":true}'::jsonb END
		FROM ?schema.run_rows r CROSS JOIN generate_series(0, $1 - 1) i
		CROSS JOIN LATERAL (SELECT CASE r.status
			WHEN 'completed' THEN 'completed'
			WHEN 'failed' THEN CASE WHEN i = 0 THEN 'failed' ELSE 'skipped' END
			WHEN 'running' THEN CASE WHEN i = 0 THEN 'running' ELSE 'not_started' END
			ELSE CASE WHEN i = 0 THEN 'ready' ELSE 'not_started' END END AS ts) s`,
		// The run lists its tasks (see migration 022).
		`UPDATE ?schema.run_rows r SET task_ids = t.ids
		FROM (SELECT run_id, array_agg(id ORDER BY idx) AS ids FROM ?schema.tasks GROUP BY run_id) t WHERE t.run_id = r.id`,
		`INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, at)
		SELECT t.run_id, t.id, NULL, CASE WHEN t.idx = 0 THEN 'ready' ELSE 'not_started' END, NULL, 0, t.created_at FROM ?schema.tasks t`,
		`INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, at)
		SELECT t.run_id, t.id, 'ready', 'running', 1, 1, t.started_at FROM ?schema.tasks t WHERE t.status IN ('running', 'completed', 'failed')`,
		`INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, at, error)
		SELECT t.run_id, t.id, 'running', t.status, 1, 1, t.finished_at, t.last_error FROM ?schema.tasks t WHERE t.status IN ('completed', 'failed')`,
		`INSERT INTO ?schema.workers (name, queues, slots, status) SELECT 'bench-' || g, '{"default": 32}', 32, 'running' FROM generate_series(1, 4) g`,
		`INSERT INTO ?schema.queues (name) VALUES ('default'), ('bulk') ON CONFLICT DO NOTHING`,
	}
	args := make([][]any, len(stmts)) // the first two take arguments
	args[0], args[1] = []any{nRuns, per, span}, []any{per}
	for i, s := range stmts {
		if _, err := d.db.ExecContext(ctx, d.q(s), args[i]...); err != nil {
			return 0, 0, 0, fmt.Errorf("seed step %d: %w", i+1, err)
		}
	}
	for _, t := range []string{"run_rows", "tasks", "task_events"} {
		if _, err := d.db.ExecContext(ctx, d.q(`VACUUM ANALYZE ?schema.`+t)); err != nil {
			return 0, 0, 0, fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	err = d.db.QueryRowContext(ctx, d.q(`SELECT (SELECT count(*) FROM ?schema.run_rows), (SELECT count(*) FROM ?schema.tasks),
		(SELECT count(*) FROM ?schema.task_events)`)).Scan(&runs, &tasks, &events)
	return runs, tasks, events, err
}

// Sample is a few rows of a seeded database for the site's queries to
// look up.
type Sample struct {
	CursorAt time.Time // created_at of the run three quarters down the runs list
	CursorID int64     // its id
	RunID    int64     // a finished run
	TaskID   int64     // a failed task
}

// PickSample picks the rows of Sample.
func (d *DB) PickSample(ctx context.Context) (Sample, error) {
	var s Sample
	err := d.db.QueryRowContext(ctx, d.q(`SELECT created_at, id FROM ?schema.run_rows ORDER BY created_at DESC, id DESC
		OFFSET (SELECT count(*) * 3 / 4 FROM ?schema.run_rows) LIMIT 1`)).Scan(&s.CursorAt, &s.CursorID)
	if err != nil {
		return s, fmt.Errorf("pick cursor: %w", err)
	}
	if err := d.db.QueryRowContext(ctx, d.q(`SELECT id FROM ?schema.run_rows WHERE status = 'completed' ORDER BY id DESC LIMIT 1`)).Scan(&s.RunID); err != nil {
		return s, fmt.Errorf("pick run: %w", err)
	}
	if err := d.db.QueryRowContext(ctx, d.q(`SELECT id FROM ?schema.tasks WHERE status = 'failed' ORDER BY id DESC LIMIT 1`)).Scan(&s.TaskID); err != nil {
		return s, fmt.Errorf("pick task: %w", err)
	}
	return s, nil
}

// TaskWindow measures, from the task rows alone (for work that writes no
// events), the earliest start and the latest finish of completed tasks.
func (d *DB) TaskWindow(ctx context.Context) (Window, error) {
	var w Window
	var first, last sql.NullTime
	err := d.db.QueryRowContext(ctx, d.q(`SELECT min(started_at), max(finished_at), count(*)
		FROM ?schema.tasks WHERE status = 'completed'`)).Scan(&first, &last, &w.Completed)
	w.First, w.Last = first.Time, last.Time
	return w, err
}

// Checkpoint forces a checkpoint, so that dirty pages of a bulk insert are
// written before a measurement rather than during it. It needs a
// superuser or the pg_checkpoint role.
func (d *DB) Checkpoint(ctx context.Context) error {
	_, err := d.db.ExecContext(ctx, `CHECKPOINT`)
	return err
}
