package migrations_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Migration 024 makes runs the exact view and renames the table run_rows;
// down makes runs the table again with cairn_runs the exact view, and up
// again restores the view. Through all three, with runs in flight and
// finished, the name a reader uses answers the same.
func TestRunsViewMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	r, err := migrations.NewRunner(db.SQL, "cairn")
	require.NoError(t, err)
	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	upDump := schemaDump(t, db.SQL, "cairn")

	// Three one-task runs (fast: no transition writes their rows) and a
	// two-task run; two tasks claimed, one of them completed.
	st, err := store.New(db.SQL, "cairn")
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	one := []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}
	two := []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{1}},
		{Idx: 1, Name: "b", MaxAttempts: 3, MaxRescues: 3, Deps: []int{0}, Dependents: []int{}}}
	ps := []store.RunInsertParams{
		{Workflow: "one", Input: json.RawMessage(`{}`), Queue: "default", Tasks: one},
		{Workflow: "one", Input: json.RawMessage(`{}`), Queue: "default", Tasks: one},
		{Workflow: "two", Input: json.RawMessage(`{}`), Queue: "default", Tasks: two},
		{Workflow: "one", Input: json.RawMessage(`{}`), Queue: "default", Tasks: one},
	}
	_, err = st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	w, err := st.WorkerInsert(ctx, "w", map[string]int{"default": 3})
	require.NoError(t, err)
	got, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{3}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 3) // the first two one-task runs and the first task of two
	_, err = st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: got[0].ID, To: store.StatusCompleted, Attempt: got[0].Attempt}}})
	require.NoError(t, err)

	want := []string{
		"completed 1/1 started finished",
		"running 0/1 started -",
		"running 0/2 started -",
		"pending 0/1 - -",
	}
	require.Equal(t, want, runAnswers(t, db.SQL, "runs"), "up: runs is exact")
	require.Equal(t, want, runAnswers(t, db.SQL, "cairn_runs"), "up: cairn_runs is runs")
	require.Equal(t, "pending 0/1 - -", runAnswers(t, db.SQL, "run_rows")[0], "the fast run's row is left as enqueued")
	require.Equal(t, "v", relkind(t, db.SQL, "runs"))

	// Revert down to and including 024, whatever came after it.
	all, err := migrations.All()
	require.NoError(t, err)
	n := len(all) - position(t, "runs_view")
	reverted, err := r.Down(ctx, n)
	require.NoError(t, err)
	require.Equal(t, "runs_view", reverted[n-1].Name)
	require.Equal(t, "r", relkind(t, db.SQL, "runs"), "down: runs is the table again")
	require.Equal(t, want, runAnswers(t, db.SQL, "cairn_runs"), "down: cairn_runs is exact")

	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, want, runAnswers(t, db.SQL, "runs"), "up again")
	require.Equal(t, want, runAnswers(t, db.SQL, "cairn_runs"), "up again")
	require.Equal(t, upDump, schemaDump(t, db.SQL, "cairn"))

	_, err = db.SQL.Exec(`UPDATE cairn.runs SET paused = true`)
	require.ErrorContains(t, err, "cannot update view", "runs is read-only: the engine writes run_rows")
}

// runAnswers reads status, counters and times of every run from the
// relation rel, in id order.
func runAnswers(t *testing.T, db *sql.DB, rel string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT status, done_tasks, task_count, started_at IS NOT NULL, finished_at IS NOT NULL FROM cairn.` + rel + ` ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	mark := map[bool]string{true: "started", false: "-"}
	for rows.Next() {
		var status string
		var done, count int
		var started, finished bool
		require.NoError(t, rows.Scan(&status, &done, &count, &started, &finished))
		fin := "-"
		if finished {
			fin = "finished"
		}
		out = append(out, fmt.Sprintf("%s %d/%d %s %s", status, done, count, mark[started], fin))
	}
	require.NoError(t, rows.Err())
	return out
}

func relkind(t *testing.T, db *sql.DB, rel string) string {
	t.Helper()
	var k string
	require.NoError(t, db.QueryRow(`SELECT relkind::text FROM pg_class WHERE oid = ('cairn.' || $1)::regclass`, rel).Scan(&k))
	return k
}
