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

// An enqueue that waits for runs, in a transaction of its own, is tried
// again when PostgreSQL breaks a deadlock by failing it: here another
// transaction holds the second awaited run's row and then asks for the
// first's, which the enqueue holds (the enqueue, the older waiter, is
// the one failed).
func TestRunInsertAfterRetriesADeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	awaited, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond(), diamond()})
	require.NoError(t, err)
	first, second := awaited[0].ID, awaited[1].ID

	other, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer other.Rollback() //nolint:errcheck
	// The enqueue's backend, with the default deadlock_timeout, detects it first.
	_, err = other.Exec(`SET LOCAL deadlock_timeout = '30s'`)
	require.NoError(t, err)
	_, err = other.Exec(`SELECT 1 FROM cairn.run_rows WHERE id = $1 FOR NO KEY UPDATE`, second)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		waiter := diamond()
		waiter.After = []int64{first, second}
		_, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{waiter})
		done <- err
	}()
	// The enqueue holds the first row and waits for the second.
	var waiting bool
	deadline := time.Now().Add(20 * time.Second)
	for !waiting {
		require.True(t, time.Now().Before(deadline), "the enqueue never waited for the second run's row")
		require.NoError(t, b.db.SQL.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND a.datname = current_database() AND a.query LIKE '%FOR NO KEY UPDATE%' AND a.pid <> pg_backend_pid())`).Scan(&waiting))
		time.Sleep(20 * time.Millisecond) // polling interval of a condition with a deadline
	}
	_, err = other.Exec(`SELECT 1 FROM cairn.run_rows WHERE id = $1 FOR NO KEY UPDATE`, first)
	require.NoError(t, err, "the enqueue was the deadlock's victim and let go")
	require.NoError(t, other.Commit())
	require.NoError(t, <-done, "the enqueue tried again after the deadlock")
}
