package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// A queue's claim floor rises with its claims, so claims skip the index
// entries of tasks claimed before; a task that becomes claimable below it
// (here a run resumed by another process, its task's available_at an hour
// back) is still claimed, once the engine's refresh reads the lowest
// claimable task.
func TestClaimFloorRisesAndATaskBelowItIsStillClaimed(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var ran atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run: func(context.Context, *engine.TaskHandle) error { ran.Add(1); return nil }}}}))
	ctx := context.Background()
	start(t, e.eng)
	require.NoError(t, e.eng.PauseQueue(ctx, "default"))
	below, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	require.NoError(t, e.eng.PauseRun(ctx, below.ID))
	_, err = e.db.SQL.Exec(`UPDATE cairn.tasks SET available_at = now() - interval '1 hour' WHERE run_id = $1`, below.ID)
	require.NoError(t, err)
	require.NoError(t, e.eng.ResumeQueue(ctx, "default"))

	for range 5 {
		_, err := e.eng.Enqueue(ctx, "w", nil)
		require.NoError(t, err)
	}
	eventually(t, 20*time.Second, "five runs done", func() bool { return ran.Load() == 5 })
	floor := engine.ClaimFloorOf(e.eng, "default")
	require.False(t, floor.At.IsZero(), "the claims raised the floor")
	require.True(t, floor.At.After(time.Now().Add(-time.Minute)), "floor %v: near the claimed tasks", floor.At)

	// Resumed as another process would: this engine does not hear of it.
	_, changed, err := e.st.RunSetPaused(ctx, below.ID, false)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, below.ID, 20*time.Second).Status)
	require.True(t, engine.ClaimFloorOf(e.eng, "default").At.Before(time.Now().Add(-30*time.Minute)),
		"the refresh lowered the floor to the task below it")
}
