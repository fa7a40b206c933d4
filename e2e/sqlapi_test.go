package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// psqlPath is the psql binary: on PATH, else the newest of Debian's.
func psqlPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	sort.Strings(found)
	if len(found) == 0 {
		t.Fatal("psql not found: install the PostgreSQL client (Debian: apt-get install postgresql-client)")
	}
	return found[len(found)-1]
}

// TestSQLAPIFromPsql drives the SQL API from the real psql, as another
// language's client would, against a Go worker process: an enqueue in a
// transaction that rolls back leaves no run, one that commits is worked;
// signals and a cancel sent from SQL reach the worker's tasks; a bad call
// fails psql with the function's message.
func TestSQLAPIFromPsql(t *testing.T) {
	t.Parallel()
	bin := buildTestworker(t)
	e := newEnv(t, bin)
	e.sideEffects()
	psql := psqlPath(t)
	run := func(script string) (string, string, error) {
		cmd := exec.Command(psql, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", e.url)
		cmd.Stdin = strings.NewReader(script)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return strings.TrimSpace(out.String()), errOut.String(), err
	}
	id := func(script string) int64 {
		t.Helper()
		out, stderr, err := run(script)
		require.NoError(t, err, stderr)
		n, err := strconv.ParseInt(out, 10, 64)
		require.NoError(t, err, "psql printed %q", out)
		return n
	}
	e.startWorker("a") // registers the workflows: their definitions are stored
	waitFor(t, 20*time.Second, "the park workflow stored", func() bool {
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM cairn.workflow_versions WHERE workflow = 'park'`).Scan(&n))
		return n > 0
	})
	b, err := json.Marshal(input{Mode: "signals", Dir: e.dir})
	require.NoError(t, err)
	in := strings.ReplaceAll(string(b), "'", "''")

	rolledBack := id("BEGIN;\nSELECT cairn.enqueue('park', '" + in + "');\nROLLBACK;\n")
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM cairn.runs WHERE id = $1`, rolledBack).Scan(&n))
	require.Zero(t, n, "rolled back: no run")

	committed := id("BEGIN;\nSELECT cairn.enqueue('park', '" + in + "', key => 'from-psql');\nCOMMIT;\n")
	tk := e.task(committed, "work")
	for _, sig := range []string{"a", "b"} {
		waitFor(t, 30*time.Second, "the task to wait for signal "+sig, func() bool {
			kind, name, ok := e.durableWait(tk.ID)
			return ok && kind == store.WaitKindSignal && name == sig
		})
		id("SELECT cairn.send_signal(" + strconv.FormatInt(tk.ID, 10) + ", '" + sig + `', '{"n": 1}');` + "\n")
	}
	require.Equal(t, store.RunCompleted, e.waitRun(committed, 30*time.Second))
	require.JSONEq(t, `{"a": {"n": 1}, "b": {"n": 1}}`, string(e.task(committed, "work").Output))

	cancelled := id("SELECT cairn.enqueue('park', '" + in + "');\n")
	ctk := e.task(cancelled, "work")
	waitFor(t, 30*time.Second, "the task to wait for a signal", func() bool {
		_, _, ok := e.durableWait(ctk.ID)
		return ok
	})
	require.Positive(t, id("SELECT cairn.cancel_run("+strconv.FormatInt(cancelled, 10)+");\n"), "tasks cancelled")
	require.Equal(t, store.RunCancelled, e.waitRun(cancelled, 10*time.Second))

	_, stderr, err := run("SELECT cairn.enqueue('no_such_workflow');\n")
	require.Error(t, err, "psql fails")
	require.Contains(t, stderr, `unknown workflow "no_such_workflow"; known workflows:`)
}
