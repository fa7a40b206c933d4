package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// A run that waits for another (After) has its roots inserted not_started
// and released, in the finishing transaction, when the awaited run
// finishes: also when the last task of that run is finished by the
// one-statement finish-and-claim (which gives way to the transaction),
// and when the enqueue came after the awaited task was claimed.
func TestRunAfterReleasedByOneStatementFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dep, err := b.st.RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 4})
	require.NoError(t, err)
	claim := store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute}
	claimed, err := b.st.TaskClaim(ctx, claim)
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	// Enqueued while the awaited task runs.
	waiter := diamond()
	waiter.After = []int64{dep[0].ID}
	got, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{waiter})
	require.NoError(t, err)
	root := rootOf(t, b.st, got[0].ID)
	require.Equal(t, store.StatusNotStarted, root.Status)
	require.Equal(t, 1, root.PendingDeps)
	// The waiting root is not claimable.
	none, err := b.st.TaskClaim(ctx, claim)
	require.NoError(t, err)
	require.Empty(t, none)

	p := store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: claimed[0].ID, To: store.StatusCompleted, From: store.StatusRunning, Attempt: claimed[0].Attempt}}}
	require.True(t, store.FinishClaimable(p))
	moved, more, err := b.st.TaskFinishAndClaimOne(ctx, p, claim)
	require.NoError(t, err)
	require.Len(t, moved, 1)
	// The root was released in the same transaction and claimed by it.
	require.Len(t, more, 1)
	require.Equal(t, root.ID, more[0].ID)

	r, err := b.st.RunGet(ctx, dep[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, r.Status)
	require.False(t, r.HasWaiters, "cleared once its waiters are counted down")
	deps, err := b.st.RunDepList(ctx, got[0].ID)
	require.NoError(t, err)
	require.Equal(t, []store.RunDep{{AfterRunID: dep[0].ID, Status: store.RunCompleted, Finished: true}}, deps)
}

// An awaited run that already finished counts with its final status at
// the enqueue; a failed one skips roots under the default rule, and the
// run ends with every task skipped.
func TestRunAfterFinishedRunDecidesAtInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dep, err := b.st.RunInsertMany(ctx, single(2))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 4})
	require.NoError(t, err)
	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{2}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: []store.TransitionItem{
		{TaskID: claimed[0].ID, To: store.StatusCompleted}, {TaskID: claimed[1].ID, To: store.StatusFailed}}})
	require.NoError(t, err)

	ok, bad := diamond(), diamond()
	ok.After = []int64{claimed[0].RunID}
	bad.After = []int64{claimed[0].RunID, claimed[1].RunID}
	got, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{ok, bad})
	require.NoError(t, err)
	require.Equal(t, store.StatusReady, rootOf(t, b.st, got[0].ID).Status)
	require.Equal(t, store.StatusSkipped, rootOf(t, b.st, got[1].ID).Status)
	r, err := b.st.RunGet(ctx, got[1].ID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, r.Status, "every task skipped")
	require.Equal(t, 4, r.DoneTasks)
	for _, id := range []int64{dep[0].ID, dep[1].ID} {
		r, err := b.st.RunGet(ctx, id)
		require.NoError(t, err)
		require.False(t, r.HasWaiters, "a finished run gets no waiters")
	}
}

// Unknown awaited runs are refused, named, and nothing is written.
func TestRunAfterUnknownRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dep, err := b.st.RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	p := diamond()
	p.After = []int64{dep[0].ID, 987654, 987655}
	_, err = b.st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.ErrorIs(t, err, store.ErrUnknownRun)
	require.ErrorContains(t, err, "#987654, #987655")
	var n int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM `+b.st.Schema()+`.runs`).Scan(&n))
	require.Equal(t, 1, n)
	r, err := b.st.RunGet(ctx, dep[0].ID)
	require.NoError(t, err)
	require.False(t, r.HasWaiters)
}

func rootOf(t *testing.T, st *store.Store, runID int64) store.Task {
	t.Helper()
	tasks, err := st.TaskListByRun(context.Background(), runID)
	require.NoError(t, err)
	return tasks[0]
}
