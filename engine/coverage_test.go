package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// Tests of features the other tests switch off or never reach: retry
// jitter, RetryIf, the negative trigger ops, FIFO slot re-acquire, the
// retention pruner and the engine's metrics.

func TestRetryJitterSpreadsDelaysWithinTenPercent(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	const runs = 16
	const delay = 10 * time.Second
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "jitter", Tasks: []engine.Task{{
		Name:  "fail",
		Retry: engine.RetryPolicy{MaxAttempts: 2, InitialDelay: delay}, // jitter on: the default
		Run: func(context.Context, *engine.TaskHandle) error {
			return errors.New("fails to be retried")
		},
	}}}))
	start(t, e.eng)
	params := make([]engine.EnqueueParams, runs)
	for i := range params {
		params[i] = engine.EnqueueParams{Workflow: "jitter"}
	}
	out, err := e.eng.EnqueueMany(context.Background(), params)
	require.NoError(t, err)

	// Each retried task's available_at is its retry event's transaction
	// time plus the delay drawn for it.
	delays := map[time.Duration]bool{}
	for _, r := range out {
		var task store.Task
		eventually(t, 20*time.Second, "first attempt to fail", func() bool {
			task = taskByName(t, e.st, r.ID, "fail")
			return task.Status == store.StatusReady && task.Attempt == 1
		})
		events, err := e.st.EventListByTask(context.Background(), task.ID)
		require.NoError(t, err)
		last := events[len(events)-1]
		require.Equal(t, store.StatusReady, last.To)
		d := task.AvailableAt.Sub(last.At)
		require.GreaterOrEqual(t, d, delay*9/10, "delay of run %d", r.ID)
		require.LessOrEqual(t, d, delay*11/10, "delay of run %d", r.ID)
		delays[d] = true
	}
	require.Greater(t, len(delays), 1, "jitter draws different delays: %v", delays)
}

func TestRetryIf(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	transient := errors.New("transient")
	policy := engine.RetryPolicy{MaxAttempts: 3, InitialDelay: 10 * time.Millisecond, NoJitter: true,
		RetryIf: func(err error) bool { return errors.Is(err, transient) }}
	var refusedCalls, acceptedCalls atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "retryif", Tasks: []engine.Task{
		{Name: "refused", Retry: policy, Run: func(context.Context, *engine.TaskHandle) error {
			refusedCalls.Add(1)
			return errors.New("not transient")
		}},
		{Name: "accepted", Retry: policy, Run: func(context.Context, *engine.TaskHandle) error {
			if acceptedCalls.Add(1) == 1 {
				return fmt.Errorf("first try: %w", transient)
			}
			return nil
		}},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "retryif", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, run.ID, 20*time.Second).Status)

	refused := taskByName(t, e.st, run.ID, "refused")
	require.Equal(t, store.StatusFailed, refused.Status)
	require.Equal(t, 1, refused.Attempt, "an error RetryIf refuses fails the task at once")
	require.EqualValues(t, 1, refusedCalls.Load())
	accepted := taskByName(t, e.st, run.ID, "accepted")
	require.Equal(t, store.StatusCompleted, accepted.Status)
	require.Equal(t, 2, accepted.Attempt, "an error RetryIf accepts is retried")
}

func TestTriggerNegativeContextOps(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ran := map[string]*atomic.Bool{}
	noop := func(name string) engine.Handler {
		ran[name] = &atomic.Bool{}
		return func(context.Context, *engine.TaskHandle) error { ran[name].Store(true); return nil }
	}
	tasks := []engine.Task{{Name: "src", Run: func(ctx context.Context, h *engine.TaskHandle) error {
		return h.SetOutput(map[string]any{"color": "red", "tags": []string{"a", "b"}, "present": 1})
	}}}
	want := map[string]string{} // task -> status
	add := func(name, key, op string, value any, status string) {
		tasks = append(tasks, engine.Task{Name: name, Deps: []string{"src"}, Run: noop(name),
			Trigger: engine.All(engine.Context(key, op, value))})
		want[name] = status
	}
	add("ne_differs", "color", "ne", "blue", store.StatusCompleted)
	add("ne_equal", "color", "ne", "red", store.StatusSkipped)
	add("ne_missing", "nokey", "ne", "red", store.StatusCompleted)
	add("not_contains_absent", "tags", "not_contains", "z", store.StatusCompleted)
	add("not_contains_present", "tags", "not_contains", "a", store.StatusSkipped)
	add("not_contains_substring", "color", "not_contains", "ed", store.StatusSkipped)
	add("not_contains_missing", "nokey", "not_contains", "a", store.StatusCompleted)
	add("not_exists_missing", "nokey", "not_exists", nil, store.StatusCompleted)
	add("not_exists_present", "present", "not_exists", nil, store.StatusSkipped)
	add("not_exists_input", "from_input", "not_exists", nil, store.StatusSkipped)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "negops", Tasks: tasks}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "negops", map[string]any{"from_input": true})
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	for name, status := range want {
		require.Equal(t, status, taskByName(t, e.st, run.ID, name).Status, name)
		require.Equal(t, status == store.StatusCompleted, ran[name].Load(), "%s ran", name)
	}
}

func TestDeferredTaskResumesBeforeNewWork(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}} })
	ctx := context.Background()
	var open atomic.Bool
	holding := make(chan struct{})
	release := make(chan struct{})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "fifo", Tasks: []engine.Task{
		{Name: "park", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			return h.DeferUntil(ctx, func(context.Context) bool { return open.Load() }, time.Hour)
		}},
	}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "hold", Tasks: []engine.Task{
		{Name: "hold", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			close(holding)
			<-release
			return nil
		}},
	}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "new", Tasks: []engine.Task{
		{Name: "new", Run: func(context.Context, *engine.TaskHandle) error { return nil }},
	}}))
	start(t, e.eng)
	parked, err := e.eng.Enqueue(ctx, "fifo", nil)
	require.NoError(t, err)
	park := taskByName(t, e.st, parked.ID, "park")
	eventually(t, 20*time.Second, "task to be deferred", func() bool {
		tk, err := e.st.TaskGet(ctx, park.ID)
		require.NoError(t, err)
		return tk.Status == store.StatusDeferred
	})
	// The deferred task freed the only slot: another task takes it.
	held, err := e.eng.Enqueue(ctx, "hold", nil)
	require.NoError(t, err)
	select {
	case <-holding:
	case <-time.After(20 * time.Second):
		t.Fatal("the freed slot was never used")
	}
	// The condition holds: the deferred task queues for the slot.
	open.Store(true)
	require.NoError(t, e.eng.Signal(ctx, park.ID))
	eventually(t, 10*time.Second, "deferred task to wait for a slot", func() bool {
		return engine.SlotWaiters(e.eng, "default") == 1
	})
	// New work arrives after it: it waits behind the deferred task.
	fresh, err := e.eng.Enqueue(ctx, "new", nil)
	require.NoError(t, err)
	close(release)
	for _, id := range []int64{held.ID, parked.ID, fresh.ID} {
		require.Equal(t, store.RunCompleted, waitRun(t, e.st, id, 20*time.Second).Status)
	}
	resumedAt := eventTime(t, e.st, park.ID, store.StatusDeferred, store.StatusRunning)
	startedAt := eventTime(t, e.st, taskByName(t, e.st, fresh.ID, "new").ID, store.StatusReady, store.StatusRunning)
	require.Less(t, resumedAt, startedAt, "the deferred task got the slot before new work")
}

// eventTime returns the id of the task's first event from -> to (event
// ids increase in commit order).
func eventTime(t testing.TB, st *store.Store, taskID int64, from, to string) int64 {
	t.Helper()
	events, err := st.EventListByTask(context.Background(), taskID)
	require.NoError(t, err)
	for _, ev := range events {
		if ev.From != nil && *ev.From == from && ev.To == to {
			return ev.ID
		}
	}
	t.Fatalf("task %d has no event %s -> %s", taskID, from, to)
	return 0
}

func TestPrunerDeletesOnlyOldFinishedRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.NoWorker = true; c.Retention = 24 * time.Hour })
	ctx := context.Background()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "prune", Tasks: []engine.Task{
		{Name: "a", Run: func(context.Context, *engine.TaskHandle) error { return nil }},
	}}))
	enqueue := func() int64 {
		r, err := e.eng.Enqueue(ctx, "prune", nil)
		require.NoError(t, err)
		return r.ID
	}
	oldDone, recentDone, oldLive := enqueue(), enqueue(), enqueue()
	require.NoError(t, e.eng.CancelRun(ctx, oldDone))
	require.NoError(t, e.eng.CancelRun(ctx, recentDone))
	// A one-task run's end is its task's (see cairn_runs): both move back.
	_, err := e.db.SQL.Exec(`UPDATE cairn.run_rows SET created_at = now() - interval '3 days',
		finished_at = CASE WHEN finished_at IS NOT NULL THEN now() - interval '2 days' END WHERE id IN ($1, $2)`, oldDone, oldLive)
	require.NoError(t, err)
	_, err = e.db.SQL.Exec(`UPDATE cairn.tasks SET finished_at = now() - interval '2 days' WHERE run_id IN ($1, $2) AND finished_at IS NOT NULL`, oldDone, oldLive)
	require.NoError(t, err)

	require.NoError(t, engine.PruneOnce(ctx, e.eng))
	_, err = e.st.RunGet(ctx, oldDone)
	require.ErrorIs(t, err, store.ErrNotFound, "a run finished before the retention period is pruned")
	events, err := e.st.EventListByRun(ctx, oldDone)
	require.NoError(t, err)
	require.Empty(t, events, "with its events")
	for _, id := range []int64{recentDone, oldLive} {
		_, err = e.st.RunGet(ctx, id)
		require.NoError(t, err, "run %d is kept", id)
	}

	// A negative retention disables pruning.
	off := newEngine(t, e.db, engine.Config{Retention: -1, NoWorker: true})
	_, err = e.db.SQL.Exec(`UPDATE cairn.tasks SET finished_at = now() - interval '400 days' WHERE run_id = $1`, recentDone)
	require.NoError(t, err)
	require.NoError(t, engine.PruneOnce(ctx, off))
	_, err = e.st.RunGet(ctx, recentDone)
	require.NoError(t, err)
}

func TestClaimDurationAndSlotMetricsMove(t *testing.T) {
	t.Parallel()
	queue := uniqueName("q")
	wf := uniqueName("metric_slots")
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{queue: {Slots: 3}} })
	started := make(chan struct{})
	release := make(chan struct{})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: wf, Queue: queue, Tasks: []engine.Task{{
		Name: "hold", Run: func(context.Context, *engine.TaskHandle) error {
			close(started)
			<-release
			return nil
		},
	}}}))
	claims := func() uint64 {
		m := metric(t, "cairn_claim_duration_seconds", nil)
		if m == nil {
			return 0
		}
		return m.GetHistogram().GetSampleCount()
	}
	gauge := func(name string) float64 {
		m := metric(t, name, map[string]string{"queue": queue})
		if m == nil {
			return -1
		}
		return m.GetGauge().GetValue()
	}
	claimsBefore := claims()
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), wf, nil)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the task never started")
	}
	require.Greater(t, claims(), claimsBefore, "claims are timed")
	eventually(t, 10*time.Second, "slot gauges to show the running task", func() bool {
		return gauge("cairn_slots") == 3 && gauge("cairn_slots_in_use") == 1
	})
	close(release)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	eventually(t, 10*time.Second, "slot gauge to show the slot free", func() bool {
		return gauge("cairn_slots_in_use") == 0
	})
	m := metric(t, "cairn_task_duration_seconds", map[string]string{"workflow": wf, "task": "hold", "outcome": "completed"})
	require.NotNil(t, m)
	require.EqualValues(t, 1, m.GetHistogram().GetSampleCount())
	require.Positive(t, m.GetHistogram().GetSampleSum())
}
