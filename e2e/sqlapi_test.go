package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// findPsql returns the psql binary as the Makefile's psql target finds
// it: psql on PATH, else the newest /usr/lib/postgresql/*/bin/psql.
func findPsql(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	if len(found) == 0 {
		t.Fatal("psql not found on PATH nor as /usr/lib/postgresql/*/bin/psql: install the PostgreSQL client (Debian: apt-get install postgresql-client)")
	}
	major := func(p string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return n
	}
	slices.SortFunc(found, func(a, b string) int { return major(a) - major(b) })
	return found[len(found)-1]
}

// psqlResult is what one psql process printed and how it exited.
type psqlResult struct {
	stdout, stderr string
	err            error // nil when it exited 0
}

// lines returns its unaligned, tuples-only output, one row a line.
func (r psqlResult) lines() []string {
	s := strings.TrimSpace(r.stdout)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// psql runs script with psql on the env's database: no psqlrc, quiet,
// unaligned rows only, stopping at the first error (ON_ERROR_STOP) with
// verbose errors (their SQLSTATE). vars are set with -v, for :'name' in
// the script.
func (e *env) psql(bin, script string, vars ...string) psqlResult {
	e.t.Helper()
	args := []string{"-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-d", e.url}
	for _, v := range vars {
		args = append(args, "-v", v)
	}
	cmd := exec.Command(bin, append(args, "-f", "-")...)
	cmd.Stdin = strings.NewReader(script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return psqlResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// mustPsql is psql that fails the test unless psql exits 0, and returns
// the rows it printed.
func (e *env) mustPsql(bin, script string, vars ...string) []string {
	e.t.Helper()
	r := e.psql(bin, script, vars...)
	require.NoError(e.t, r.err, "psql failed:\n%s\nstderr:\n%s", script, r.stderr)
	return r.lines()
}

// psqlID parses the one row psql printed as an id.
func psqlID(t *testing.T, rows []string) int64 {
	t.Helper()
	require.Len(t, rows, 1, "psql rows")
	id, err := strconv.ParseInt(rows[0], 10, 64)
	require.NoError(t, err, "psql row %q", rows[0])
	return id
}

// TestSQLAPIFromPsql drives the SQL API of migration 035 from the real
// psql client while a real worker process (internal/testworker, which
// registers and so stores the park workflow) runs the tasks: a rolled
// back enqueue leaves no run, a committed one runs on the worker, signals
// sent from psql wake a task waiting for them and reach its output, a
// waiting run is cancelled from psql, and a bad call makes psql exit
// non-zero naming what was wrong. The suite's truth check runs at the
// end (newEnv).
func TestSQLAPIFromPsql(t *testing.T) {
	t.Parallel()
	psql := findPsql(t)
	e := newEnv(t, buildTestworker(t))
	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, e.db.QueryRow(query, args...).Scan(&n))
		return n
	}
	status := func(run int64) string {
		t.Helper()
		var s string
		require.NoError(t, e.db.QueryRow(`SELECT status FROM cairn.runs WHERE id = $1`, run).Scan(&s))
		return s
	}
	// waitStatus polls cairn.runs until the run shows want.
	waitStatus := func(run int64, want string) {
		t.Helper()
		waitFor(t, 30*time.Second, fmt.Sprintf("run %d %s in cairn.runs", run, want), func() bool { return status(run) == want })
	}
	inputVar := func(mode string) string {
		t.Helper()
		b, err := json.Marshal(input{Mode: mode, Dir: e.dir})
		require.NoError(t, err)
		return "input=" + string(b)
	}
	// waitSignalWait waits until the run's work task is deferred in a
	// durable wait for signal name, and returns the task.
	waitSignalWait := func(run int64, name string) store.Task {
		t.Helper()
		var tk store.Task
		waitFor(t, 30*time.Second, fmt.Sprintf("run %d's task to wait for signal %q", run, name), func() bool {
			tk = e.task(run, "work")
			kind, n, ok := e.durableWait(tk.ID)
			return tk.Status == store.StatusDeferred && ok && kind == store.WaitKindSignal && n == name
		})
		return tk
	}
	sideEffects := e.sideEffects() // the table the signals mode's steps write to
	w := e.startWorker("a")

	// A rolled back enqueue: the run is there inside its transaction only.
	{
		rows := e.mustPsql(psql, `BEGIN;
SELECT cairn.enqueue('park', :'input'::jsonb) AS id \gset
SELECT :id, (SELECT count(*) FROM cairn.runs WHERE id = :id), (SELECT count(*) FROM cairn.tasks WHERE run_id = :id);
ROLLBACK;
`, inputVar("quick"))
		require.Len(t, rows, 1)
		f := strings.Split(rows[0], "|")
		require.Len(t, f, 3, "psql row %q", rows[0])
		require.Equal(t, []string{"1", "2"}, f[1:], "inside its transaction the run and its two tasks are there")
		id, err := strconv.ParseInt(f[0], 10, 64)
		require.NoError(t, err)
		require.Positive(t, id)
		require.Zero(t, count(`SELECT count(*) FROM cairn.runs WHERE id = $1`, id), "cairn.runs after ROLLBACK")
		require.Zero(t, count(`SELECT count(*) FROM cairn.run_rows WHERE id = $1`, id), "cairn.run_rows after ROLLBACK")
		require.Zero(t, count(`SELECT count(*) FROM cairn.tasks WHERE run_id = $1`, id), "cairn.tasks after ROLLBACK")
	}

	// A committed enqueue: the run completes on the worker process.
	{
		id := psqlID(t, e.mustPsql(psql, `BEGIN;
SELECT cairn.enqueue('park', :'input'::jsonb);
COMMIT;
`, inputVar("quick")))
		waitStatus(id, store.RunCompleted)
		for _, name := range []string{"work", "after"} {
			tk := e.task(id, name)
			require.Equal(t, store.StatusCompleted, tk.Status, "task %s", name)
			require.Equal(t, w.id, e.completedBy(tk.ID), "task %s completed by the worker process", name)
		}
	}

	// Signals sent from psql wake the waiting task and reach its output.
	{
		id := psqlID(t, e.mustPsql(psql, `SELECT cairn.enqueue('park', :'input'::jsonb, key => 'psql:signals');`, inputVar("signals")))
		tk := waitSignalWait(id, "a")
		// The key is held while the run is unfinished: the same enqueue returns it.
		again := psqlID(t, e.mustPsql(psql, `SELECT cairn.enqueue('park', :'input'::jsonb, key => 'psql:signals');`, inputVar("signals")))
		require.Equal(t, id, again, "enqueue with the key of an unfinished run")
		sig := psqlID(t, e.mustPsql(psql, `BEGIN;
SELECT cairn.send_signal(:task, 'a', '{"n": 1}');
COMMIT;
`, fmt.Sprintf("task=%d", tk.ID)))
		require.Positive(t, sig)
		waitSignalWait(id, "b") // a woke it: it took a and waits for b
		e.mustPsql(psql, `SELECT cairn.send_signal(:task, 'b', '{"n": 2}');`, fmt.Sprintf("task=%d", tk.ID))
		waitStatus(id, store.RunCompleted)
		tk = e.task(id, "work")
		require.Equal(t, 1, tk.Attempt)
		require.Equal(t, w.id, e.completedBy(tk.ID))
		require.JSONEq(t, `{"a": {"n": 1}, "b": {"n": 2}}`, string(tk.Output), "the payloads sent from psql")
		require.Equal(t, 1, sideEffects(tk.ID, "got-a"), "a was received once")
		require.Equal(t, 1, sideEffects(tk.ID, "got-b"), "b was received once")

		// The task has finished: a further signal is refused (55000).
		r := e.psql(psql, `SELECT cairn.send_signal(:task, 'a');`, fmt.Sprintf("task=%d", tk.ID))
		requirePsqlError(t, r, "55000", "is completed; only an unfinished task can be signalled")
	}

	// A run waiting for a signal, cancelled from psql.
	{
		id := psqlID(t, e.mustPsql(psql, `SELECT cairn.enqueue('park', :'input'::jsonb);`, inputVar("signals")))
		waitSignalWait(id, "a")
		rows := e.mustPsql(psql, `SELECT cairn.cancel_run(:run);`, fmt.Sprintf("run=%d", id))
		require.Equal(t, []string{"2"}, rows, "cancel_run: the deferred work task and the not started after task")
		waitStatus(id, store.RunCancelled)
		for _, name := range []string{"work", "after"} {
			require.Equal(t, store.StatusCancelled, e.task(id, name).Status, "task %s", name)
		}

		r := e.psql(psql, `SELECT cairn.cancel_run(:run);`, fmt.Sprintf("run=%d", id))
		requirePsqlError(t, r, "55000", fmt.Sprintf("cancel_run: run %d is cancelled", id))
	}

	// Bad calls: psql exits non-zero naming what was wrong, with the SQLSTATE.
	{
		before := count(`SELECT count(*) FROM cairn.runs`)
		r := e.psql(psql, `SELECT cairn.enqueue('no_such_workflow');`)
		requirePsqlError(t, r, "P0002", `enqueue: unknown workflow "no_such_workflow"`)
		require.Contains(t, r.stderr, "known workflows: ", "the message lists the stored workflows")
		require.Contains(t, r.stderr, "park")
		require.Equal(t, before, count(`SELECT count(*) FROM cairn.runs`), "no run made by the failed call")

		r = e.psql(psql, `SELECT cairn.send_signal(0, 'a');`)
		requirePsqlError(t, r, "P0002", "send_signal: task 0 not found")
	}
}

// requirePsqlError checks that psql exited non-zero (3: a script stopped
// by ON_ERROR_STOP) with an error of sqlstate whose message contains msg
// on its stderr, and printed no rows.
func requirePsqlError(t *testing.T, r psqlResult, sqlstate, msg string) {
	t.Helper()
	var exit *exec.ExitError
	require.ErrorAs(t, r.err, &exit, "psql exit; stderr:\n%s", r.stderr)
	require.Equal(t, 3, exit.ExitCode(), "psql exit code of a script stopped by ON_ERROR_STOP; stderr:\n%s", r.stderr)
	require.Contains(t, r.stderr, "ERROR:  "+sqlstate+": ", "psql stderr")
	require.Contains(t, r.stderr, msg, "psql stderr")
	require.Empty(t, strings.TrimSpace(r.stdout), "psql stdout")
}
