package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// A cancel whose transaction began before a claim of its task, and that
// waited for the claim's commit, finishes the task (and its run) no
// earlier than the claim started it: now() is the transaction's start,
// which here precedes the start it finds.
func TestCancelBehindAClaimFinishesAfterTheStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p := single(1)[0]
	key := "keyed" // a run with a key is not a fast run: its row is written
	p.Key = &key
	runs, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.NoError(t, err)
	w, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "w", Queues: map[string]int{"default": 1}, Handles: []string{"one.only"}})
	require.NoError(t, err)

	cancelTx, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer cancelTx.Rollback() //nolint:errcheck
	var cancelPID int
	var cancelStart time.Time
	require.NoError(t, cancelTx.QueryRow(`SELECT pg_backend_pid(), now()`).Scan(&cancelPID, &cancelStart))

	claimTx, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer claimTx.Rollback() //nolint:errcheck
	claimed, err := b.st.WithTx(claimTx).TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	var started time.Time
	require.NoError(t, claimTx.QueryRow(`SELECT started_at FROM cairn.tasks WHERE id = $1`, claimed[0].ID).Scan(&started))
	require.True(t, started.After(cancelStart), "the claim started the task (%s) after the cancel's transaction began (%s)", started, cancelStart)

	done := make(chan error, 1)
	go func() {
		_, _, err := b.st.WithTx(cancelTx).TaskCancelTree(ctx, []int64{claimed[0].ID}, json.RawMessage(`{"reason": "test"}`), nil)
		done <- err
	}()
	eventuallyStore(t, 10*time.Second, "the cancel to wait for the claim's lock", func() bool {
		var waiting bool
		require.NoError(t, b.db.SQL.QueryRow(`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, cancelPID).Scan(&waiting))
		return waiting
	})
	require.NoError(t, claimTx.Commit())
	require.NoError(t, <-done)
	require.NoError(t, cancelTx.Commit())

	var status string
	var taskStart, taskEnd, runStart, runEnd time.Time
	require.NoError(t, b.db.SQL.QueryRow(`SELECT t.status, t.started_at, t.finished_at, r.started_at, r.finished_at
		FROM cairn.tasks t JOIN cairn.runs r ON r.id = t.run_id WHERE t.id = $1`, claimed[0].ID).Scan(&status, &taskStart, &taskEnd, &runStart, &runEnd))
	require.Equal(t, store.StatusCancelled, status)
	require.Equal(t, runs[0].ID, claimed[0].RunID)
	require.False(t, taskEnd.Before(taskStart), "task finished %s before it started %s", taskEnd, taskStart)
	require.False(t, runEnd.Before(runStart), "run finished %s before it started %s", runEnd, runStart)
	pgtest.CheckRelations(t, b.db.SQL, "after a cancel behind a claim")
}

// eventuallyStore polls cond until it holds or the deadline passes.
func eventuallyStore(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval of a condition with a deadline
	}
}
