package engine_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/pgtest"
)

// sqlAPIEnv is an engine, started, with workflow "dag" (a -> b, c; d
// after b and c, with a custom rule), "keyed" (a concurrency key read
// from the input) and "signal" (waits for the signal "go" and stores its
// payload as output). Its definitions are stored, as the SQL API reads
// them.
func sqlAPIEnv(t *testing.T) env {
	t.Helper()
	e := setup(t, func(c *engine.Config) { c.PollInterval = 50 * time.Millisecond })
	noop := func(context.Context, *engine.TaskHandle) error { return nil }
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "dag", Tasks: []engine.Task{
		{Name: "a", Run: noop, Retry: engine.RetryPolicy{MaxAttempts: 5}},
		{Name: "b", Deps: []string{"a"}, Run: noop, RequeueOnInterrupt: true},
		{Name: "c", Deps: []string{"a"}, Run: noop, Queue: "side"},
		{Name: "d", Deps: []string{"b", "c"}, Run: noop, Trigger: engine.AllDone},
	}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "keyed", Tasks: []engine.Task{
		{Name: "a", Run: noop, Concurrency: &engine.Concurrency{Key: "tenant.id", Max: 2},
			RateLimit: &engine.RateLimit{Group: "api", Limit: 10, Per: time.Second}},
	}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "signal", Tasks: []engine.Task{
		{Name: "wait", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			payload, err := h.AwaitSignal(ctx, "go", time.Minute)
			if err != nil {
				return err
			}
			return h.SetOutput(payload)
		}},
	}}))
	start(t, e.eng)
	return e
}

// sqlEnqueue calls cairn.enqueue in tx with the SQL after the workflow
// and input (named arguments), and returns the run's id.
func sqlEnqueue(t *testing.T, q interface {
	QueryRow(string, ...any) *sql.Row
}, workflow, input, named string, args ...any) (int64, error) {
	t.Helper()
	var id int64
	err := q.QueryRow(`SELECT cairn.enqueue($1, $2::jsonb`+named+`)`, append([]any{workflow, input}, args...)...).Scan(&id)
	return id, err
}

// rowsOf returns what a run wrote, ids and times left out: its run row
// and its tasks' rows, in task order, as JSON.
func rowsOf(t *testing.T, db *sql.DB, runID int64) string {
	t.Helper()
	var out string
	require.NoError(t, db.QueryRow(`SELECT jsonb_build_object(
		'run', (SELECT to_jsonb(r) - '{id,created_at,updated_at,started_at,finished_at,task_ids,unique_until,debounce_at,debounce_until}'::text[]
			FROM cairn.runs r WHERE r.id = $1),
		'tasks', (SELECT jsonb_agg(to_jsonb(t) - '{id,run_id,created_at,updated_at,available_at,started_at,first_started_at,finished_at,lease_expires_at,wait_since,wait_until}'::text[] ORDER BY t.idx)
			FROM cairn.tasks t WHERE t.run_id = $1),
		'events', (SELECT count(*) FROM cairn.task_events e WHERE e.run_id = $1))::text`, runID).Scan(&out))
	return out
}

// An enqueue from SQL writes the rows Engine.Enqueue writes, for each
// option the function takes: both run one statement (run_insert).
func TestSQLEnqueueWritesWhatEnqueueWrites(t *testing.T) {
	t.Parallel()
	e := sqlAPIEnv(t)
	ctx := context.Background()
	require.NoError(t, e.eng.PauseQueue(ctx, "default")) // the rows as enqueued, none claimed
	require.NoError(t, e.eng.PauseQueue(ctx, "side"))
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	cases := []struct {
		name, workflow, input, named string
		args                         []any
		opts                         []engine.EnqueueOption
	}{
		{"dag", "dag", `{"x": 1}`, ``, nil, nil},
		{"keyed", "keyed", `{"tenant": {"id": "t1"}}`, ``, nil, nil},
		{"options", "dag", `{}`, `, key => $3, queue => $4, priority => $5, run_at => $6`,
			[]any{"k-opts-sql", "other", 7, at},
			[]engine.EnqueueOption{engine.WithKey("k-opts-go"), engine.WithQueue("other"), engine.WithPriority(7), engine.WithRunAt(at)}},
		{"unique for", "dag", `{}`, `, key => $3, unique_for => $4::interval`, []any{"k-uniq-sql", "1 hour"},
			[]engine.EnqueueOption{engine.WithKey("k-uniq-go"), engine.WithUniqueFor(time.Hour)}},
		{"debounce", "dag", `{"n": 1}`, `, debounce_key => $3, debounce_wait => $4::interval, debounce_max_wait => $5::interval`,
			[]any{"d-sql", "1 minute", "1 hour"}, []engine.EnqueueOption{engine.WithDebounce("d-go", time.Minute, time.Hour)}},
		{"singleton", "dag", `{"n": 1}`, `, singleton_key => $3`, []any{"s-sql"}, []engine.EnqueueOption{engine.WithSingleton("s-go")}},
	}
	for _, c := range cases {
		viaSQL, err := sqlEnqueue(t, e.db.SQL, c.workflow, c.input, c.named, c.args...)
		require.NoError(t, err, c.name)
		viaGo, err := e.eng.Enqueue(ctx, c.workflow, json.RawMessage(c.input), c.opts...)
		require.NoError(t, err, c.name)
		want := rowsOf(t, e.db.SQL, viaGo.ID)
		got := rowsOf(t, e.db.SQL, viaSQL)
		// The keys differ by name only: each path holds its own.
		for _, k := range []string{"k-opts", "k-uniq", "d", "s"} {
			want = strings.ReplaceAll(want, `"`+k+`-go"`, `"`+k+`"`)
			got = strings.ReplaceAll(got, `"`+k+`-sql"`, `"`+k+`"`)
		}
		require.JSONEq(t, want, got, c.name)
	}
	// The same key returns the run that holds it, from either side.
	again, err := sqlEnqueue(t, e.db.SQL, "dag", `{}`, `, key => $3`, "k-opts-go")
	require.NoError(t, err)
	var holder int64
	require.NoError(t, e.db.SQL.QueryRow(`SELECT id FROM cairn.runs WHERE idempotency_key = 'k-opts-go'`).Scan(&holder))
	require.Equal(t, holder, again)
	// A debounce from SQL replaces the queued run's input.
	first, err := sqlEnqueue(t, e.db.SQL, "dag", `{"n": 1}`, `, debounce_key => 'd2', debounce_wait => '1 minute', debounce_max_wait => '1 hour'`)
	require.NoError(t, err)
	second, err := sqlEnqueue(t, e.db.SQL, "dag", `{"n": 2}`, `, debounce_key => 'd2', debounce_wait => '1 minute', debounce_max_wait => '1 hour'`)
	require.NoError(t, err)
	require.Equal(t, first, second)
	var input string
	require.NoError(t, e.db.SQL.QueryRow(`SELECT input::text FROM cairn.runs WHERE id = $1`, first).Scan(&input))
	require.JSONEq(t, `{"n": 2}`, input)
	pgtest.CheckRelations(t, e.db.SQL, "after enqueues from SQL")
}

// sqlState returns the SQLSTATE and message of a PostgreSQL error.
func sqlState(t *testing.T, err error) (string, string) {
	t.Helper()
	var pe *pq.Error
	require.True(t, errors.As(err, &pe), "a PostgreSQL error: %v", err)
	return string(pe.Code), pe.Message
}

// Bad input raises an error naming what was wrong, with its SQLSTATE,
// and writes nothing.
func TestSQLEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := sqlAPIEnv(t)
	big := `{"b": "` + strings.Repeat("x", 1<<20) + `"}`
	cases := []struct {
		name, workflow, input, named, state, says string
	}{
		{"unknown workflow", "nope", `{}`, ``, "P0002", `unknown workflow "nope"; known workflows: dag, keyed, signal`},
		{"no workflow", "", `{}`, ``, "22023", "workflow is required"},
		{"not an object", "dag", `[1]`, ``, "22023", "input must be a JSON object, not array"},
		{"too large", "dag", big, ``, "54000", "limit 1048576"},
		{"flow key missing", "keyed", `{"tenant": {}}`, ``, "22023", `task "a": no value at "tenant.id" for its concurrency key`},
		{"bad queue", "dag", `{}`, `, queue => 'no spaces'`, "22023", `queue "no spaces"`},
		{"empty key", "dag", `{}`, `, key => ''`, "22023", "idempotency key must be 1-512 bytes"},
		{"window without key", "dag", `{}`, `, unique_for => '1 hour'`, "22023", "unique_for: needs a key"},
		{"negative window", "dag", `{}`, `, key => 'k', unique_for => '-1 hour'`, "22023", "must be positive"},
		{"debounce and run_at", "dag", `{}`, `, debounce_key => 'd', debounce_wait => '1s', debounce_max_wait => '1m', run_at => now()`, "22023", "run_at is not allowed"},
		{"wait over max wait", "dag", `{}`, `, debounce_key => 'd', debounce_wait => '1h', debounce_max_wait => '1m'`, "22023", "0 <= wait <= max wait"},
		{"debounce and singleton", "dag", `{}`, `, debounce_key => 'd', singleton_key => 's'`, "22023", "give one of them"},
		{"debounce of a keyed input", "keyed", `{"tenant": {"id": "t"}}`, `, singleton_key => 's'`, "22023", "takes a flow key from the input"},
		{"run_at out of range", "dag", `{}`, `, run_at => '10000-01-02'`, "22023", "outside years 1 to 9999"},
	}
	for _, c := range cases {
		_, err := sqlEnqueue(t, e.db.SQL, c.workflow, c.input, c.named)
		require.Error(t, err, c.name)
		state, msg := sqlState(t, err)
		require.Equal(t, c.state, state, "%s: %s", c.name, msg)
		require.Contains(t, msg, c.says, c.name)
	}
	var runs, tasks int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT (SELECT count(*) FROM cairn.run_rows), (SELECT count(*) FROM cairn.tasks)`).Scan(&runs, &tasks))
	require.Zero(t, runs+tasks, "nothing written")
}

// A run enqueued from SQL exists when, and only if, the caller's
// transaction commits, and the engine works it.
func TestSQLEnqueueInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	e := sqlAPIEnv(t)
	tx, err := e.db.SQL.Begin()
	require.NoError(t, err)
	id, err := sqlEnqueue(t, tx, "keyed", `{"tenant": {"id": "t"}}`, ``)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs WHERE id = $1`, id).Scan(&n))
	require.Zero(t, n, "rolled back: no run")

	tx, err = e.db.SQL.Begin()
	require.NoError(t, err)
	id, err = sqlEnqueue(t, tx, "keyed", `{"tenant": {"id": "t"}}`, ``)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	run := waitRun(t, e.st, id, 20*time.Second)
	require.Equal(t, "completed", run.Status)
}

// send_signal and cancel_run from SQL do what SendSignal and CancelRun do,
// and refuse what they refuse, with SQLSTATEs.
func TestSQLSendSignalAndCancelRun(t *testing.T) {
	t.Parallel()
	e := sqlAPIEnv(t)
	ctx := context.Background()
	id, err := sqlEnqueue(t, e.db.SQL, "signal", `{}`, ``)
	require.NoError(t, err)
	task := func(run int64) (tid int64, status string) {
		require.NoError(t, e.db.SQL.QueryRow(`SELECT id, status FROM cairn.tasks WHERE run_id = $1`, run).Scan(&tid, &status))
		return tid, status
	}
	tid, _ := task(id)
	var sig int64
	require.NoError(t, e.db.SQL.QueryRow(`SELECT cairn.send_signal($1, 'go', '{"ok": true}')`, tid).Scan(&sig))
	require.Positive(t, sig)
	run := waitRun(t, e.st, id, 20*time.Second)
	require.Equal(t, "completed", run.Status)
	var out string
	require.NoError(t, e.db.SQL.QueryRow(`SELECT output::text FROM cairn.tasks WHERE id = $1`, tid).Scan(&out))
	require.JSONEq(t, `{"ok": true}`, out)

	_, err = e.db.SQL.Exec(`SELECT cairn.send_signal($1, 'go')`, tid)
	state, msg := sqlState(t, err)
	require.Equal(t, "55000", state)
	require.Contains(t, msg, "is completed; only an unfinished task can be signalled")
	_, err = e.db.SQL.Exec(`SELECT cairn.send_signal(0, 'go')`)
	state, _ = sqlState(t, err)
	require.Equal(t, "P0002", state)
	_, err = e.db.SQL.Exec(`SELECT cairn.send_signal($1, '')`, tid)
	state, _ = sqlState(t, err)
	require.Equal(t, "22023", state)

	// A waiting run cancelled from SQL, and one from Go: the same rows.
	viaSQL, err := sqlEnqueue(t, e.db.SQL, "signal", `{}`, ``)
	require.NoError(t, err)
	viaGo, err := e.eng.Enqueue(ctx, "signal", nil)
	require.NoError(t, err)
	for _, r := range []int64{viaSQL, viaGo.ID} {
		eventually(t, 20*time.Second, "the task parked", func() bool { _, st := task(r); return st == "deferred" })
	}
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT cairn.cancel_run($1)`, viaSQL).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, e.eng.CancelRun(ctx, viaGo.ID))
	for _, r := range []int64{viaSQL, viaGo.ID} {
		require.Equal(t, "cancelled", waitRun(t, e.st, r, 20*time.Second).Status)
	}
	require.JSONEq(t, rowsOf(t, e.db.SQL, viaGo.ID), rowsOf(t, e.db.SQL, viaSQL))
	var detail string
	require.NoError(t, e.db.SQL.QueryRow(`SELECT detail::text FROM cairn.task_events WHERE run_id = $1 AND to_status = 'cancelled'`, viaSQL).Scan(&detail))
	require.JSONEq(t, `{"reason": "run cancelled", "actor": {"name": "postgres", "role": "sql"}}`, detail)

	_, err = e.db.SQL.Exec(`SELECT cairn.cancel_run($1)`, viaSQL)
	state, msg = sqlState(t, err)
	require.Equal(t, "55000", state)
	require.Contains(t, msg, "is cancelled; only an unfinished run can be cancelled")
	_, err = e.db.SQL.Exec(`SELECT cairn.cancel_run(0)`)
	state, _ = sqlState(t, err)
	require.Equal(t, "P0002", state)
	pgtest.CheckRelations(t, e.db.SQL, "after signals and cancels from SQL")
}

// A run waiting (WithAfter) for a run cancelled from SQL is decided by an
// engine: its root is skipped (AllSuccess), and so the tasks after it,
// and the run finishes.
func TestSQLCancelRunSettlesTheRunsWaitingForIt(t *testing.T) {
	t.Parallel()
	e := sqlAPIEnv(t)
	ctx := context.Background()
	awaited, err := e.eng.Enqueue(ctx, "signal", nil)
	require.NoError(t, err)
	waiter, err := e.eng.Enqueue(ctx, "dag", nil, engine.WithAfter(awaited.ID))
	require.NoError(t, err)
	eventually(t, 20*time.Second, "the awaited task parked", func() bool {
		var st string
		require.NoError(t, e.db.SQL.QueryRow(`SELECT status FROM cairn.tasks WHERE run_id = $1`, awaited.ID).Scan(&st))
		return st == "deferred"
	})
	_, err = e.db.SQL.Exec(`SELECT cairn.cancel_run($1)`, awaited.ID)
	require.NoError(t, err)
	run := waitRun(t, e.st, waiter.ID, 20*time.Second)
	require.Equal(t, "completed", run.Status)
	var skipped, left int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FILTER (WHERE status = 'skipped'), (SELECT count(*) FROM cairn.pending_settles)
		FROM cairn.tasks WHERE run_id = $1`, waiter.ID).Scan(&skipped, &left))
	require.Equal(t, 3, skipped, "a, b and c skipped; d (AllDone) ran")
	require.Zero(t, left)
	pgtest.CheckRelations(t, e.db.SQL, "after a settle")
}
