package migrations_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// Migrations 029 and 030 over a database with runs, tasks and workers in
// it: runs from before keep no version and any worker of their workflow
// serves them; a versioned run goes only to a worker of its version, and
// cairn_unroutable lists it by version while none is live; down restores
// the schema, with the data, and up applies again.
func TestWorkflowVersionsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := upTo(t, "workflow_versions")
	before := schemaDump(t, db.SQL, "cairn")
	st, err := store.New(db.SQL, "cairn")
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	// A run from before versions, and a worker row of an old build.
	var oldRun int64
	require.NoError(t, db.SQL.QueryRow(`INSERT INTO cairn.run_rows (workflow, input, queue, task_count) VALUES ('wf', '{}', 'default', 1) RETURNING id`).Scan(&oldRun))
	_, err = db.SQL.Exec(`INSERT INTO cairn.tasks (run_id, idx, workflow, name, queue, status) VALUES ($1, 0, 'wf', 'a', 'default', 'ready')`, oldRun)
	require.NoError(t, err)
	_, err = db.SQL.Exec(`UPDATE cairn.run_rows SET task_ids = ARRAY(SELECT id FROM cairn.tasks WHERE run_id = $1)`, oldRun)
	require.NoError(t, err)
	_, err = db.SQL.Exec(`INSERT INTO cairn.workers (name, queues, slots, handles) VALUES ('old', '{"default": 1}', 1, '{wf.a}')`)
	require.NoError(t, err)

	applied, err := r.Up(ctx, 2)
	require.NoError(t, err)
	require.Len(t, applied, 2)
	require.Equal(t, []string{"-"}, queryStrings(t, db.SQL, `SELECT coalesce(version, '-') FROM cairn.runs`))
	require.Equal(t, []string{"-"}, queryStrings(t, db.SQL, `SELECT coalesce(array_to_string(versions, ','), '-') FROM cairn.workers`))
	require.Empty(t, queryStrings(t, db.SQL, `SELECT workflow FROM cairn.cairn_unroutable`), "the old worker serves the old run")

	// A versioned run, and a worker of v1 only.
	v2 := "v2"
	undoFunctions := runInsertAsIn035(t, db.SQL)
	_, err = st.RunInsertMany(ctx, []store.RunInsertParams{{Workflow: "wf", Input: json.RawMessage(`{}`), Queue: "default", Version: &v2,
		Tasks: []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}})
	require.NoError(t, err)
	undoFunctions()
	_, err = db.SQL.Exec(`UPDATE cairn.workers SET status = 'stopped'`)
	require.NoError(t, err)
	w, err := st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "v1", Queues: map[string]int{"default": 10},
		Handles: []string{"wf.a"}, Versions: []string{"wf@v1"}})
	require.NoError(t, err)
	require.Equal(t, []string{"wf v2"}, queryStrings(t, db.SQL, `SELECT workflow || ' ' || version FROM cairn.cairn_unroutable`))
	got, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, oldRun, got[0].RunID, "the run from before versions, not v2's")
	require.NoError(t, st.WorkflowVersionSave(ctx, []store.WorkflowVersion{{Workflow: "wf", Version: "v2",
		Definition: json.RawMessage(`{}`), Templates: json.RawMessage(`[]`), Compatible: []string{"v1"}}}))

	// Down with data in it.
	reverted, err := r.Down(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, "unroutable_versions", reverted[0].Name)
	require.Equal(t, "workflow_versions", reverted[1].Name)
	require.Equal(t, before, schemaDump(t, db.SQL, "cairn"))
	require.Equal(t, []string{"2"}, queryStrings(t, db.SQL, `SELECT count(*)::text FROM cairn.runs`), "runs survive")
	require.Empty(t, queryStrings(t, db.SQL, `SELECT workflow FROM cairn.cairn_unroutable`), "without versions, the handles alone route")
	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
}
