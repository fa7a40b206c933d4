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

// A queue's keyed floor comes from reads of the lowest keyed task the
// engine could claim, not from claims: a read from the start sets it (a
// task of a paused run does not hold it down), claims and a read from the
// floor on leave it where it is, and keyed claims skip a task below it
// (here a run resumed by another process, its task's available_at an hour
// back) until a read from the start lowers the floor to it and wakes the
// claimers. (PollInterval is an hour: the test makes the reads itself.)
func TestKeyedFloorComesFromReadsAndATaskBelowItIsStillClaimed(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.PollInterval = time.Hour })
	var ran atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Concurrency: &engine.Concurrency{Key: "tenant", Max: 100},
		Run:         func(context.Context, *engine.TaskHandle) error { ran.Add(1); return nil }}}}))
	ctx := context.Background()
	start(t, e.eng)
	require.NoError(t, e.eng.PauseQueue(ctx, "default"))
	below, err := e.eng.Enqueue(ctx, "w", map[string]string{"tenant": "a"})
	require.NoError(t, err)
	require.NoError(t, e.eng.PauseRun(ctx, below.ID))
	_, err = e.db.SQL.Exec(`UPDATE cairn.tasks SET available_at = now() - interval '1 hour' WHERE run_id = $1`, below.ID)
	require.NoError(t, err)
	require.NoError(t, e.eng.ResumeQueue(ctx, "default"))
	require.True(t, engine.KeyedFloorOf(e.eng, "default").IsZero())

	require.NoError(t, engine.ReadKeyedFloor(ctx, e.eng, "default", true, time.Second))
	floor := engine.KeyedFloorOf(e.eng, "default")
	require.True(t, floor.After(time.Now().Add(-time.Minute)), "floor %v: nothing claimable is older (the paused run's task does not count)", floor)
	require.NoError(t, engine.ReadKeyedFloor(ctx, e.eng, "default", false, time.Hour))
	require.True(t, engine.KeyedFloorOf(e.eng, "default").Equal(floor), "a read from the floor on does not lower it")
	for i := range 5 {
		_, err := e.eng.Enqueue(ctx, "w", map[string]string{"tenant": string(rune('a' + i))})
		require.NoError(t, err)
	}
	eventually(t, 20*time.Second, "five runs done", func() bool { return ran.Load() == 5 })
	require.True(t, engine.KeyedFloorOf(e.eng, "default").Equal(floor), "claims do not move the keyed floor")

	// Resumed as another process would; a claim made then (for a new run)
	// passes the task below the floor over.
	_, changed, err := e.st.RunSetPaused(ctx, below.ID, false)
	require.NoError(t, err)
	require.True(t, changed)
	_, err = e.eng.Enqueue(ctx, "w", map[string]string{"tenant": "a"})
	require.NoError(t, err)
	eventually(t, 20*time.Second, "the new run done", func() bool { return ran.Load() >= 6 })
	task, err := e.st.TaskListByRun(ctx, below.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatusReady, task[0].Status, "the task below the floor waits")
	require.NoError(t, engine.ReadKeyedFloor(ctx, e.eng, "default", false, time.Second))
	require.True(t, engine.KeyedFloorOf(e.eng, "default").After(time.Now().Add(-time.Minute)), "a read from the floor on does not find it")

	require.NoError(t, engine.ReadKeyedFloor(ctx, e.eng, "default", true, time.Second))
	require.True(t, engine.KeyedFloorOf(e.eng, "default").Before(time.Now().Add(-30*time.Minute)), "a read from the start lowers the floor to it")
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, below.ID, 20*time.Second).Status, "and wakes the claimers, which take it")

	// ResumeRun on this engine puts the floor back to the start at once.
	require.NoError(t, e.eng.PauseQueue(ctx, "default"))
	paused, err := e.eng.Enqueue(ctx, "w", map[string]string{"tenant": "a"})
	require.NoError(t, err)
	require.NoError(t, e.eng.PauseRun(ctx, paused.ID))
	engine.SetKeyedFloor(e.eng, "default", time.Now())
	require.NoError(t, e.eng.ResumeRun(ctx, paused.ID))
	require.True(t, engine.KeyedFloorOf(e.eng, "default").IsZero(), "ResumeRun resets the keyed floor")
}
