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

// deferredTask registers workflow name, whose only task parks in
// DeferUntil(open, every) counting the condition's checks in calls, and
// returns the task id of a run of it once the task is deferred.
func deferredTask(t *testing.T, e env, name string, every time.Duration, requeue bool, open *atomic.Bool, calls *atomic.Int64) (runID, taskID int64) {
	t.Helper()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: name, Tasks: []engine.Task{{Name: "wait", RequeueOnInterrupt: requeue,
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			return h.DeferUntil(ctx, func(context.Context) bool { calls.Add(1); return open.Load() }, every)
		}}}}))
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, name, nil)
	require.NoError(t, err)
	taskID = taskByName(t, e.st, run.ID, "wait").ID
	eventually(t, 20*time.Second, "the task deferred", func() bool {
		tk, err := e.st.TaskGet(ctx, taskID)
		require.NoError(t, err)
		return tk.Status == store.StatusDeferred
	})
	return run.ID, taskID
}

func TestDeferUntilStoresIntervalAndLastCheckAdvances(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var open atomic.Bool
	var calls atomic.Int64
	runID, id := deferredTask(t, e, "cond", 20*time.Millisecond, false, &open, &calls)
	ctx := context.Background()

	tk, err := e.st.TaskGet(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, tk.WaitEveryMs, "the park stores the condition's interval")
	require.EqualValues(t, 20, *tk.WaitEveryMs)
	require.NotNil(t, tk.WaitSince, "the park stores when it began")
	require.Nil(t, tk.WaitKind, "a condition is no durable wait")

	first, ok := e.eng.LastCheck(id)
	require.True(t, ok, "this process holds the task: its last check is known")
	eventually(t, 10*time.Second, "a later check", func() bool {
		at, ok := e.eng.LastCheck(id)
		return ok && at.After(first)
	})
	_, ok = e.eng.LastCheck(id + 1000)
	require.False(t, ok, "a task this process does not hold")

	open.Store(true)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, runID, 20*time.Second).Status)
	tk, err = e.st.TaskGet(ctx, id)
	require.NoError(t, err)
	require.Nil(t, tk.WaitEveryMs, "the resume cleared the interval")
	require.Nil(t, tk.WaitSince)
	eventually(t, 10*time.Second, "the finished task to be let go", func() bool { _, ok := e.eng.LastCheck(id); return !ok })
}

func TestDeferUntilSignalChecksTheConditionAtOnce(t *testing.T) {
	t.Parallel()
	var clock offsetClock
	e := setup(t, clock.config)
	var open atomic.Bool
	var calls atomic.Int64
	// The interval is an hour: only a signal checks it again.
	runID, id := deferredTask(t, e, "cond", time.Hour, false, &open, &calls)
	ctx := context.Background()
	require.EqualValues(t, 1, calls.Load(), "checked once, before parking")
	first, ok := e.eng.LastCheck(id)
	require.True(t, ok)

	clock.advance(time.Minute)
	require.NoError(t, e.eng.Signal(ctx, id))
	// At least once: at once here, and maybe again when the signal's
	// NOTIFY comes back.
	eventually(t, 10*time.Second, "the signal's check", func() bool { return calls.Load() >= 2 })
	at, ok := e.eng.LastCheck(id)
	require.True(t, ok)
	require.GreaterOrEqual(t, at.Sub(first), time.Minute, "the last check is the signal's, by the engine's clock")
	tk, err := e.st.TaskGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusDeferred, tk.Status, "the condition is still false")

	open.Store(true)
	require.NoError(t, e.eng.Signal(ctx, id))
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, runID, 20*time.Second).Status)
	require.GreaterOrEqual(t, calls.Load(), int64(3))
}

// A task parked in DeferUntil is no durable wait: its handler is in
// flight, and an interrupt follows RequeueOnInterrupt.
func TestDeferUntilKeepsTheInterruptRule(t *testing.T) {
	t.Parallel()
	for _, requeue := range []bool{true, false} {
		e := setup(t, func(c *engine.Config) { c.ShutdownGrace = 200 * time.Millisecond })
		var open atomic.Bool
		var calls atomic.Int64
		_, id := deferredTask(t, e, "cond", time.Hour, requeue, &open, &calls)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		require.NoError(t, e.eng.Shutdown(ctx))
		cancel()
		tk, err := e.st.TaskGet(context.Background(), id)
		require.NoError(t, err)
		want := store.StatusInterrupted
		if requeue {
			want = store.StatusReady
		}
		require.Equal(t, want, tk.Status, "requeue_on_interrupt %v", requeue)
		require.Nil(t, tk.LastError, "a graceful stop is no error of the task")
		var stop string
		require.NoError(t, e.db.SQL.QueryRow(`SELECT error FROM cairn.task_events WHERE task_id = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&stop))
		require.Contains(t, stop, "interrupted by shutdown")
		require.NotContains(t, stop, "durable wait")
		require.Nil(t, tk.WaitEveryMs, "the interrupt cleared the interval")
	}
}
