package migrations_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// Migration 022 lists each existing run's tasks in idx order, whatever
// order their ids were drawn in; a workflow in flight across it finishes
// through the list; deleting a run deletes its tasks without the foreign
// key; and down restores the key and the index.
func TestRunTaskIDsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := upTo(t, "run_task_ids")
	before := schemaDump(t, db.SQL, "cairn")

	// A run whose first task completed, second is ready and third (a
	// join of both) waits; its ids were drawn out of idx order. And a
	// one-task run.
	var run, other int64
	require.NoError(t, db.SQL.QueryRow(`INSERT INTO cairn.runs (workflow, status, input, queue, task_count, done_tasks, started_at)
		VALUES ('wf', 'running', '{}', 'default', 3, 1, now()) RETURNING id`).Scan(&run))
	require.NoError(t, db.SQL.QueryRow(`INSERT INTO cairn.runs (workflow, input, queue, task_count)
		VALUES ('wf', '{}', 'default', 1) RETURNING id`).Scan(&other))
	ids := map[string]int64{}
	for _, row := range []struct {
		name, status, deps, dependents, output string
		idx, pending                           int
	}{
		{"c", "not_started", "{0,1}", "{}", "", 2, 1},
		{"a", "completed", "{}", "{2}", `{"a": 1}`, 0, 0},
		{"b", "ready", "{}", "{2}", "", 1, 0},
	} {
		var id int64
		require.NoError(t, db.SQL.QueryRow(`INSERT INTO cairn.tasks (run_id, idx, workflow, name, queue, status, deps, dependents, pending_deps, output)
			VALUES ($1, $2, 'wf', $3, 'default', $4, $5, $6, $7, nullif($8, '')::jsonb) RETURNING id`,
			run, row.idx, row.name, row.status, row.deps, row.dependents, row.pending, row.output).Scan(&id))
		ids[row.name] = id
	}
	_, err := db.SQL.Exec(`INSERT INTO cairn.tasks (run_id, idx, workflow, name, queue, status) VALUES ($1, 0, 'wf', 'x', 'default', 'ready')`, other)
	require.NoError(t, err)

	_, err = r.Up(ctx, 1)
	require.NoError(t, err)
	var listed pq.Int64Array
	require.NoError(t, db.SQL.QueryRow(`SELECT task_ids FROM cairn.runs WHERE id = $1`, run).Scan(&listed))
	require.Equal(t, pq.Int64Array{ids["a"], ids["b"], ids["c"]}, listed)

	undo := runRowsAsIn024(t, db.SQL)
	st, err := store.New(db.SQL, "cairn")
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	w, err := st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	claim := func() []store.Claimed {
		t.Helper()
		got, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute})
		require.NoError(t, err)
		return got
	}
	complete := func(cs ...store.Claimed) {
		t.Helper()
		items := make([]store.TransitionItem, len(cs))
		for i, c := range cs {
			items[i] = store.TransitionItem{TaskID: c.ID, To: store.StatusCompleted, Attempt: c.Attempt, Output: json.RawMessage(`{"` + c.Name + `": 2}`)}
		}
		_, err := st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items})
		require.NoError(t, err)
	}
	first := claim()
	require.Len(t, first, 2) // b and x
	complete(first...)
	join := claim()
	require.Len(t, join, 1)
	require.Equal(t, ids["c"], join[0].ID, "b's completion released the join through the run's list")
	require.JSONEq(t, `[[0, {"a": 1}], [1, {"b": 2}]]`, string(join[0].DepOutputs))
	complete(join...)
	got, err := st.RunGet(ctx, run)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, got.Status)

	_, err = db.SQL.Exec(`DELETE FROM cairn.runs WHERE id = $1`, other)
	require.NoError(t, err)
	var left int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE run_id = $1`, other).Scan(&left))
	require.Zero(t, left, "deleting a run deletes its tasks")

	undo()
	reverted, err := r.Down(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "run_task_ids", reverted[0].Name)
	require.Equal(t, before, schemaDump(t, db.SQL, "cairn"))
	_, err = db.SQL.Exec(`INSERT INTO cairn.tasks (run_id, idx, workflow, name, queue, status) VALUES ($1, 0, 'wf', 'dup', 'default', 'ready')`, run)
	require.ErrorContains(t, err, "tasks_run_idx", "down restores the unique (run_id, idx) index")
	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
}
