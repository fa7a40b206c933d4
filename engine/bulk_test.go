package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// TestRequeueRuns: RequeueRuns sends every interrupted task of the runs
// back to ready and skips runs with none; RetryRuns leaves interrupted
// runs alone.
func TestRequeueRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.NoWorker = true })
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{
		{Name: "a", Run: noop}, {Name: "b", Run: noop}, {Name: "c", Deps: []string{"a"}, Run: noop},
	}}))
	ctx := context.Background()
	start(t, e.eng)
	parked, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	plain, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	// Park a and b of the first run as a shutdown would.
	var items []store.TransitionItem
	for _, name := range []string{"a", "b"} {
		items = append(items, store.TransitionItem{TaskID: taskByName(t, e.st, parked.ID, name).ID, To: store.StatusInterrupted})
	}
	_, _, err = e.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusReady}, Items: items})
	require.NoError(t, err)
	run, err := e.st.RunGet(ctx, parked.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunInterrupted, run.Status)

	res, err := e.eng.RetryRuns(ctx, []int64{parked.ID})
	require.NoError(t, err)
	require.Empty(t, res.Done, "retry does not touch interrupted tasks")
	require.Equal(t, store.StatusInterrupted, taskByName(t, e.st, parked.ID, "a").Status)

	res, err = e.eng.RequeueRuns(ctx, []int64{999999, plain.ID, parked.ID})
	require.NoError(t, err)
	require.Equal(t, []int64{parked.ID}, res.Done)
	require.Equal(t, []int64{plain.ID, 999999}, res.Skipped)
	for _, name := range []string{"a", "b"} {
		require.Equal(t, store.StatusReady, taskByName(t, e.st, parked.ID, name).Status, name)
	}
	require.Equal(t, store.StatusNotStarted, taskByName(t, e.st, parked.ID, "c").Status)
	run, err = e.st.RunGet(ctx, parked.ID)
	require.NoError(t, err)
	require.NotEqual(t, store.RunInterrupted, run.Status)

	err = e.eng.RequeueRun(ctx, parked.ID)
	require.ErrorIs(t, err, engine.ErrInvalidState)
	require.ErrorContains(t, err, fmt.Sprintf("run %d is %s and has no interrupted task to requeue", parked.ID, run.Status))
	require.ErrorIs(t, e.eng.RequeueRun(ctx, 999999), engine.ErrNotFound)
}
