package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// A DeferUntil park stores its condition's interval and when it parked,
// through each of the park statements, and is no durable wait; any move
// out of deferred clears both.
func TestConditionParkStoresIntervalAndAnyMoveClearsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(5))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 5})
	require.NoError(t, err)
	got := claimAll(t, b.st, w, 3)
	require.Len(t, got, 3)

	since := time.Now().UTC().Truncate(time.Microsecond)
	park := func(c store.Claimed, every time.Duration) store.TransitionItem {
		it := store.TransitionItem{TaskID: c.ID, From: store.StatusRunning, To: store.StatusDeferred, Attempt: c.Attempt}
		it.SetCondition(every, since)
		return it
	}
	parkParams := func(items ...store.TransitionItem) store.TransitionParams {
		return store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items}
	}
	// The three ways a worker parks: a plain transition, one statement
	// that parks and claims, and the transaction that parks and claims.
	moved, err := b.st.Transition(ctx, parkParams(park(got[0], 5*time.Second)))
	require.NoError(t, err)
	require.Len(t, moved, 1)
	p := parkParams(park(got[1], 250*time.Millisecond))
	require.True(t, store.ParkClaimable(p))
	moved, _, err = b.st.TaskParkAndClaimOne(ctx, p, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	moved, _, err = b.st.TaskDeferAndClaim(ctx, store.TaskDeferClaimParams{Park: parkParams(park(got[2], 300*time.Microsecond)),
		Queues: []string{"default"}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, moved, 1)

	for i, want := range []int64{5000, 250, 1} { // under a millisecond: 1 ms
		tk, err := b.st.TaskGet(ctx, got[i].ID)
		require.NoError(t, err)
		require.Equal(t, store.StatusDeferred, tk.Status)
		require.NotNil(t, tk.WaitEveryMs, "task %d: the interval is stored", i)
		require.Equal(t, want, *tk.WaitEveryMs)
		require.NotNil(t, tk.WaitSince, "task %d: when it parked is stored", i)
		require.True(t, since.Equal(*tk.WaitSince))
		require.Nil(t, tk.WaitKind, "a condition is no durable wait")
	}
	var durable int
	require.NoError(t, b.db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM `+pgtest.Schema+`.cairn_durable_waits`).Scan(&durable))
	require.Zero(t, durable, "condition waits are not listed as durable waits")

	// Any move out of deferred clears them: a resume, a cancel, an
	// interrupt back to ready.
	_, err = b.st.TaskResumeBatch(ctx, store.TaskResumeParams{WorkerID: w, Lease: time.Minute,
		Tasks: []store.ResumeTask{{ID: got[0].ID, Attempt: got[0].Attempt}}})
	require.NoError(t, err)
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusDeferred},
		Items: []store.TransitionItem{{TaskID: got[1].ID, To: store.StatusCancelled}}})
	require.NoError(t, err)
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusDeferred}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: got[2].ID, To: store.StatusReady, Attempt: got[2].Attempt}}})
	require.NoError(t, err)
	for i, status := range []string{store.StatusRunning, store.StatusCancelled, store.StatusReady} {
		tk, err := b.st.TaskGet(ctx, got[i].ID)
		require.NoError(t, err)
		require.Equal(t, status, tk.Status, "task %d moved", i)
		require.Nil(t, tk.WaitEveryMs, "task %d: the move to %s clears the interval", i, status)
		require.Nil(t, tk.WaitSince, "task %d: the move to %s clears the wait's start", i, status)
	}
}
