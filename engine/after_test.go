package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// afterEnv registers "ok" (completes), "bad" (fails at once, no retry),
// both held until gate is closed, and "waiter" (root a, then b), whose
// handlers count their calls per run.
type afterEnv struct {
	env
	gate chan struct{}
	mu   sync.Mutex
	ran  map[int64][]string // run -> tasks of waiter that ran
}

func setupAfter(t *testing.T) *afterEnv {
	t.Helper()
	a := &afterEnv{env: setup(t, nil), gate: make(chan struct{}), ran: map[int64][]string{}}
	held := func(err error) engine.Handler {
		return func(ctx context.Context, h *engine.TaskHandle) error {
			select {
			case <-a.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			return err
		}
	}
	record := func(ctx context.Context, h *engine.TaskHandle) error {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.ran[h.RunID()] = append(a.ran[h.RunID()], h.Name())
		return nil
	}
	require.NoError(t, a.eng.Register(engine.Workflow{Name: "ok", Tasks: []engine.Task{{Name: "x", Run: held(nil)}}}))
	require.NoError(t, a.eng.Register(engine.Workflow{Name: "bad", Tasks: []engine.Task{
		{Name: "x", Run: held(engine.Permanent(errors.New("boom"))), Retry: engine.RetryPolicy{MaxAttempts: 1}}}}))
	require.NoError(t, a.eng.Register(engine.Workflow{Name: "waiter", Tasks: []engine.Task{
		{Name: "a", Run: record},
		{Name: "b", Deps: []string{"a"}, Run: record},
	}}))
	return a
}

func (a *afterEnv) tasksRan(run int64) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ran[run]...)
}

// A run enqueued WithAfter two runs, one of which fails, follows its
// trigger rule: AllSuccess (the default) skips its roots, AllDone runs
// them, and rules over RunSucceeded/RunFailed decide by each run. The
// waiters are enqueued while the awaited runs are still running, and
// again after they finished.
func TestWithAfterFollowsTriggerRule(t *testing.T) {
	t.Parallel()
	a := setupAfter(t)
	ctx := context.Background()
	start(t, a.eng)
	okRun, err := a.eng.Enqueue(ctx, "ok", nil)
	require.NoError(t, err)
	badRun, err := a.eng.Enqueue(ctx, "bad", nil)
	require.NoError(t, err)

	cases := []struct {
		name string
		opts []engine.EnqueueOption
		runs bool
	}{
		{"default all_success", nil, false},
		{"all_done", []engine.EnqueueOption{engine.WithAfterRule(engine.AllDone)}, true},
		{"one_failed", []engine.EnqueueOption{engine.WithAfterRule(engine.OneFailed)}, true},
		{"none_failed", []engine.EnqueueOption{engine.WithAfterRule(engine.NoneFailed)}, false},
		{"ok succeeded and bad failed", []engine.EnqueueOption{engine.WithAfterRule(engine.All(
			engine.RunSucceeded(okRun.ID), engine.RunFailed(badRun.ID)))}, true},
		{"bad succeeded", []engine.EnqueueOption{engine.WithAfterRule(engine.Any(engine.RunSucceeded(badRun.ID)))}, false},
		{"ok failed", []engine.EnqueueOption{engine.WithAfterRule(engine.All(engine.RunFailed(okRun.ID)))}, false},
	}
	enqueue := func() []int64 {
		var ids []int64
		for _, c := range cases {
			opts := append([]engine.EnqueueOption{engine.WithAfter(okRun.ID, badRun.ID)}, c.opts...)
			r, err := a.eng.Enqueue(ctx, "waiter", nil, opts...)
			require.NoError(t, err, c.name)
			ids = append(ids, r.ID)
		}
		return ids
	}
	before := enqueue()
	for _, id := range before {
		root := taskByName(t, a.st, id, "a")
		require.Equal(t, store.StatusNotStarted, root.Status, "a waits for the runs")
		require.Equal(t, 2, root.PendingDeps)
	}
	close(a.gate)
	require.Equal(t, store.RunCompleted, waitRun(t, a.st, okRun.ID, 20*time.Second).Status)
	require.Equal(t, store.RunFailed, waitRun(t, a.st, badRun.ID, 20*time.Second).Status)
	after := enqueue()

	for _, ids := range [][]int64{before, after} {
		for i, c := range cases {
			run := waitRun(t, a.st, ids[i], 20*time.Second)
			require.Equal(t, store.RunCompleted, run.Status, c.name)
			want, status := []string(nil), store.StatusSkipped
			if c.runs {
				want, status = []string{"a", "b"}, store.StatusCompleted
			}
			require.Equal(t, status, taskByName(t, a.st, ids[i], "a").Status, c.name)
			require.Equal(t, status, taskByName(t, a.st, ids[i], "b").Status, c.name)
			require.Equal(t, want, a.tasksRan(ids[i]), c.name)
		}
	}
	deps, err := a.st.RunDepList(ctx, before[0])
	require.NoError(t, err)
	require.Equal(t, []store.RunDep{
		{AfterRunID: okRun.ID, Status: store.RunCompleted, Finished: true},
		{AfterRunID: badRun.ID, Status: store.RunFailed, Finished: true},
	}, deps)
}

// A run that waits for a cancelled run sees it as failed (RunFailed).
func TestWithAfterCancelledRunCountsAsFailed(t *testing.T) {
	t.Parallel()
	a := setupAfter(t)
	ctx := context.Background()
	start(t, a.eng)
	okRun, err := a.eng.Enqueue(ctx, "ok", nil)
	require.NoError(t, err)
	w, err := a.eng.Enqueue(ctx, "waiter", nil, engine.WithAfter(okRun.ID),
		engine.WithAfterRule(engine.All(engine.RunFailed(okRun.ID))))
	require.NoError(t, err)
	require.NoError(t, a.eng.CancelRun(ctx, okRun.ID))
	require.Equal(t, store.RunCancelled, waitRun(t, a.st, okRun.ID, 20*time.Second).Status)
	require.Equal(t, store.RunCompleted, waitRun(t, a.st, w.ID, 20*time.Second).Status)
	require.Equal(t, []string{"a", "b"}, a.tasksRan(w.ID))
	close(a.gate)
}

// A dependency that finishes while the waiting run is enqueued is never
// missed: every waiter ends, its root run, whichever of the awaited
// task's finish and the enqueue commits first.
func TestWithAfterConcurrentFinishNeverMissed(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) {
		c.Queues = map[string]engine.QueueConfig{engine.DefaultQueue: {Slots: 8}}
	})
	ctx := context.Background()
	var ran atomic.Int64
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "quick", Tasks: []engine.Task{
		{Name: "x", Run: func(context.Context, *engine.TaskHandle) error { return nil }}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "waiter", Tasks: []engine.Task{
		{Name: "a", Run: func(context.Context, *engine.TaskHandle) error { ran.Add(1); return nil }}}}))
	start(t, e.eng)

	const rounds, perRound = 40, 3
	var waiters []int64
	for range rounds {
		dep, err := e.eng.Enqueue(ctx, "quick", nil)
		require.NoError(t, err)
		// Several waiters race the awaited task's finish.
		var wg sync.WaitGroup
		ids := make([]int64, perRound)
		errs := make([]error, perRound)
		for i := range perRound {
			wg.Go(func() {
				r, err := e.eng.Enqueue(ctx, "waiter", nil, engine.WithAfter(dep.ID))
				if err == nil {
					ids[i] = r.ID
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		waiters = append(waiters, ids...)
	}
	for _, id := range waiters {
		run := waitRun(t, e.st, id, 30*time.Second)
		require.Equal(t, store.RunCompleted, run.Status, "run %d", id)
		require.Equal(t, store.StatusCompleted, taskByName(t, e.st, id, "a").Status, "run %d", id)
	}
	require.EqualValues(t, rounds*perRound, ran.Load())
}

// Unknown runs are refused with a typed error naming them, and nothing
// is written; a rule must speak of the runs awaited.
func TestWithAfterRefusesBadInput(t *testing.T) {
	t.Parallel()
	a := setupAfter(t)
	ctx := context.Background()
	okRun, err := a.eng.Enqueue(ctx, "ok", nil)
	require.NoError(t, err)

	_, err = a.eng.Enqueue(ctx, "waiter", nil, engine.WithAfter(okRun.ID, 424242))
	require.ErrorIs(t, err, engine.ErrUnknownRun)
	require.ErrorIs(t, err, engine.ErrInvalidInput)
	require.ErrorContains(t, err, "#424242")
	require.NotContains(t, err.Error(), fmt.Sprintf("#%d", okRun.ID))

	_, err = a.eng.EnqueueMany(ctx, []engine.EnqueueParams{
		{Workflow: "waiter", Options: []engine.EnqueueOption{engine.WithAfter(okRun.ID)}},
		{Workflow: "waiter", Options: []engine.EnqueueOption{engine.WithAfter(515151)}},
	})
	require.ErrorIs(t, err, engine.ErrUnknownRun)
	require.ErrorContains(t, err, "#515151")

	for _, opts := range [][]engine.EnqueueOption{
		{engine.WithAfter(0)},
		{engine.WithAfterRule(engine.AllDone)},
		{engine.WithAfter(okRun.ID), engine.WithAfterRule(engine.All(engine.RunSucceeded(okRun.ID + 1000)))},
		{engine.WithAfter(okRun.ID), engine.WithAfterRule(engine.All(engine.Succeeded("a")))},
		{engine.WithAfter(okRun.ID), engine.WithAfterRule(engine.TriggerRule{Shorthand: "nope"})},
	} {
		_, err := a.eng.Enqueue(ctx, "waiter", nil, opts...)
		require.ErrorIs(t, err, engine.ErrInvalidInput)
	}
	var n int
	require.NoError(t, a.db.SQL.QueryRow(`SELECT count(*) FROM `+a.st.Schema()+`.runs`).Scan(&n))
	require.Equal(t, 1, n, "only the awaited run exists")
	r, err := a.st.RunGet(ctx, okRun.ID)
	require.NoError(t, err)
	require.False(t, r.HasWaiters, "a refused enqueue marks nothing")

	// Run conditions belong to WithAfterRule, not to a workflow.
	err = a.eng.Register(engine.Workflow{Name: "w2", Tasks: []engine.Task{
		{Name: "a", Run: func(context.Context, *engine.TaskHandle) error { return nil },
			Trigger: engine.All(engine.RunSucceeded(1))}}})
	require.ErrorIs(t, err, engine.ErrInvalidWorkflow)
	close(a.gate)
}

// EnqueueMany and EnqueueTx take WithAfter; in a transaction the awaited
// run may be one enqueued in it, and a rollback leaves nothing.
func TestWithAfterEnqueueManyAndTx(t *testing.T) {
	t.Parallel()
	a := setupAfter(t)
	ctx := context.Background()
	start(t, a.eng)

	tx, err := a.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	okRun, err := a.eng.EnqueueTx(ctx, tx, "ok", nil)
	require.NoError(t, err)
	w1, err := a.eng.EnqueueTx(ctx, tx, "waiter", nil, engine.WithAfter(okRun.ID))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	rb, err := a.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	gone, err := a.eng.EnqueueTx(ctx, rb, "waiter", nil, engine.WithAfter(okRun.ID))
	require.NoError(t, err)
	require.NoError(t, rb.Rollback())

	badRun, err := a.eng.Enqueue(ctx, "bad", nil)
	require.NoError(t, err)
	many, err := a.eng.EnqueueMany(ctx, []engine.EnqueueParams{
		{Workflow: "waiter", Options: []engine.EnqueueOption{engine.WithAfter(okRun.ID)}},
		{Workflow: "waiter", Options: []engine.EnqueueOption{engine.WithAfter(okRun.ID, badRun.ID)}},
		{Workflow: "waiter"},
	})
	require.NoError(t, err)
	require.Len(t, many, 3)
	// Not held back: ready at once (two of the four slots are free, so
	// the engine may have claimed it already).
	require.Contains(t, []string{store.StatusReady, store.StatusRunning, store.StatusCompleted},
		taskByName(t, a.st, many[2].ID, "a").Status, "no WithAfter: ready at once")
	close(a.gate)

	for _, id := range []int64{w1.ID, many[0].ID, many[2].ID} {
		require.Equal(t, store.RunCompleted, waitRun(t, a.st, id, 20*time.Second).Status)
		require.Equal(t, []string{"a", "b"}, a.tasksRan(id))
	}
	require.Equal(t, store.RunCompleted, waitRun(t, a.st, many[1].ID, 20*time.Second).Status)
	require.Equal(t, store.StatusSkipped, taskByName(t, a.st, many[1].ID, "a").Status, "bad failed")
	require.Empty(t, a.tasksRan(many[1].ID))
	_, err = a.st.RunGet(ctx, gone.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}
