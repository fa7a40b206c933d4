package migrations_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Migration 019's down step stores in the run rows what cairn_runs read:
// the code before it reads the rows and expects every transition to have
// written them.
func TestRunStatusOnReadDownStoresTheRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	r, err := migrations.NewRunner(db.SQL, "cairn")
	require.NoError(t, err)
	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	st, err := store.New(db.SQL, "cairn")
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	ps := make([]store.RunInsertParams, 3)
	for i := range ps {
		ps[i] = store.RunInsertParams{Workflow: "wf", Input: json.RawMessage(`{}`), Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
	}
	runs, err := st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	w, err := st.WorkerInsert(ctx, "w", map[string]int{"default": 2})
	require.NoError(t, err)
	got, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{2}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 2)
	_, err = st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: got[0].ID, To: store.StatusCompleted, Attempt: got[0].Attempt}}})
	require.NoError(t, err)
	want := map[int64]*store.Run{}
	for _, run := range runs {
		want[run.ID], err = st.RunGet(ctx, run.ID)
		require.NoError(t, err)
	}
	require.Equal(t, store.RunCompleted, want[got[0].RunID].Status)
	require.Equal(t, store.RunRunning, want[got[1].RunID].Status)

	// Revert down to and including 019, whatever came after it.
	all, err := migrations.All()
	require.NoError(t, err)
	n := len(all) - position(t, "run_status_on_read")
	reverted, err := r.Down(ctx, n)
	require.NoError(t, err)
	require.Equal(t, "run_status_on_read", reverted[n-1].Name)
	for id, run := range want {
		var status string
		var done int
		var started, finished *time.Time
		require.NoError(t, db.SQL.QueryRow(`SELECT status, done_tasks, started_at, finished_at FROM cairn.runs WHERE id = $1`, id).
			Scan(&status, &done, &started, &finished))
		require.Equal(t, run.Status, status, "run %d", id)
		require.Equal(t, run.DoneTasks, done, "run %d", id)
		require.Equal(t, run.StartedAt == nil, started == nil, "run %d", id)
		if started != nil {
			require.True(t, run.StartedAt.Equal(*started), "run %d", id)
		}
		require.Equal(t, run.FinishedAt == nil, finished == nil, "run %d", id)
	}
	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
}
