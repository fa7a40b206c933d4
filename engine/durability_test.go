package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// claimAsDeadWorker claims the run's ready task for a worker that will
// never heartbeat, with a lease that has already run out.
func claimAsDeadWorker(t *testing.T, st *store.Store) store.Claimed {
	t.Helper()
	ctx := context.Background()
	dead, err := st.WorkerInsert(ctx, "dead", map[string]int{"default": 1})
	require.NoError(t, err)
	got, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: dead, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Millisecond})
	require.NoError(t, err)
	require.Len(t, got, 1)
	// The lease is over by the database clock before the caller rescues:
	// a statement within the millisecond would find it still held.
	eventually(t, 5*time.Second, "the dead worker's lease to expire", func() bool {
		expired, err := st.TaskExpiredLeases(ctx, time.Time{}, 10)
		require.NoError(t, err)
		for _, tk := range expired {
			if tk.ID == got[0].ID {
				return true
			}
		}
		return false
	})
	return got[0]
}

func TestRescuerAppliesInterruptRule(t *testing.T) {
	t.Parallel()
	for _, requeue := range []bool{true, false} {
		e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"other": {Slots: 1}} })
		require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop, RequeueOnInterrupt: requeue}}}))
		ctx := context.Background()
		run, err := e.eng.Enqueue(ctx, "w", nil)
		require.NoError(t, err)
		c := claimAsDeadWorker(t, e.st)
		start(t, e.eng) // works queue "other" only: it rescues but does not run the task
		want := store.StatusInterrupted
		if requeue {
			want = store.StatusReady
		}
		eventually(t, 10*time.Second, "rescue", func() bool {
			tk, err := e.st.TaskGet(ctx, c.ID)
			require.NoError(t, err)
			return tk.Status == want
		})
		tk, _ := e.st.TaskGet(ctx, c.ID)
		require.Equal(t, 1, tk.Rescues)
		require.Nil(t, tk.WorkerID)
		require.Contains(t, *tk.LastError, "lease expired")
		if !requeue {
			r, err := e.st.RunGet(ctx, run.ID)
			require.NoError(t, err)
			require.Equal(t, store.RunInterrupted, r.Status)
			require.NoError(t, e.eng.RequeueTask(ctx, c.ID))
			tk, _ = e.st.TaskGet(ctx, c.ID)
			require.Equal(t, store.StatusReady, tk.Status)
		}
	}
}

func TestRescueStopsAfterMaxRescues(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"other": {Slots: 1}} })
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop, RequeueOnInterrupt: true, MaxRescues: 2,
		Retry: engine.RetryPolicy{MaxAttempts: 10}}}}))
	ctx := context.Background()
	_, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	start(t, e.eng)
	var id int64
	for round := 1; round <= 3; round++ {
		c := claimAsDeadWorker(t, e.st)
		id = c.ID
		want := store.StatusReady
		if round == 3 {
			want = store.StatusFailed
		}
		eventually(t, 10*time.Second, "rescue", func() bool {
			tk, err := e.st.TaskGet(ctx, id)
			require.NoError(t, err)
			return tk.Status == want
		})
	}
	tk, _ := e.st.TaskGet(ctx, id)
	require.Contains(t, *tk.LastError, "max_rescues 2")
}

func TestRescueNeverOverwritesACompletedTask(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop, RequeueOnInterrupt: true}}}))
	ctx := context.Background()
	_, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	c := claimAsDeadWorker(t, e.st)
	// The rescuer reads the expired lease ...
	expired, err := e.st.TaskExpiredLeases(ctx, time.Time{}, 10)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	// ... the worker completes the task after all ...
	moved, err := e.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: *c.WorkerID,
		Items: []store.TransitionItem{{TaskID: c.ID, To: store.StatusCompleted, Attempt: c.Attempt}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	// ... and the rescuer's compare-and-set finds nothing to move.
	moved, err = e.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred}, LeaseExpired: true,
		Items: []store.TransitionItem{{TaskID: c.ID, To: store.StatusReady, Attempt: c.Attempt, Rescue: true}}})
	require.NoError(t, err)
	require.Empty(t, moved)
	tk, err := e.st.TaskGet(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatusCompleted, tk.Status)

	// The other order: rescued first, the late completion changes nothing.
	_, err = e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	c = claimAsDeadWorker(t, e.st)
	moved, err = e.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, LeaseExpired: true,
		Items: []store.TransitionItem{{TaskID: c.ID, To: store.StatusReady, Attempt: c.Attempt, Rescue: true}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	moved, err = e.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: *c.WorkerID,
		Items: []store.TransitionItem{{TaskID: c.ID, To: store.StatusCompleted, Attempt: c.Attempt}}})
	require.NoError(t, err)
	require.Empty(t, moved)
}

func TestShutdownAppliesInterruptRuleAfterGrace(t *testing.T) {
	t.Parallel()
	// "quick" finishes only once claiming has stopped (the engine logs
	// "engine shutting down" then): were it to finish earlier, "later" could
	// be claimed and run before the shutdown began.
	var claimingStopped <-chan struct{}
	e := setup(t, func(c *engine.Config) {
		c.ShutdownGrace = 300 * time.Millisecond
		c.Logger, claimingStopped = onLog(c.Logger, "engine shutting down")
	})
	started := make(chan struct{}, 3)
	block := func(ctx context.Context, h *engine.TaskHandle) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{
		{Name: "requeue", Run: block, RequeueOnInterrupt: true},
		{Name: "park", Run: block},
		{Name: "quick", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			started <- struct{}{}
			<-claimingStopped
			return nil
		}},
		{Name: "later", Deps: []string{"quick"}, Run: noop},
	}}))
	ctx := context.Background()
	require.NoError(t, e.eng.Start(ctx))
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	for range 3 {
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("handlers did not start")
		}
	}
	done := make(chan error)
	go func() { done <- e.eng.Shutdown(ctx) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown hung")
	}
	require.Equal(t, store.StatusReady, taskByName(t, e.st, run.ID, "requeue").Status)
	require.Equal(t, store.StatusInterrupted, taskByName(t, e.st, run.ID, "park").Status)
	require.Equal(t, store.StatusCompleted, taskByName(t, e.st, run.ID, "quick").Status)
	require.Equal(t, store.StatusReady, taskByName(t, e.st, run.ID, "later").Status, "ready work stays for later")
	workers, err := e.st.WorkerList(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, "stopped", workers[0].Status)
	require.Equal(t, 1, taskByName(t, e.st, run.ID, "requeue").Attempt, "the attempt number moves on")
	require.Equal(t, 4, taskByName(t, e.st, run.ID, "requeue").MaxAttempts, "a graceful stop spends no attempt of the budget (3)")
}

func TestDeferReleasesSlotAndSignalWakes(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}} })
	var open atomic.Bool
	deferred := make(chan int64, 1)
	var resumedAttempt atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "parked", Tasks: []engine.Task{{Name: "wait",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			local := "kept"
			if err := h.Checkpoint(map[string]string{"stage": "before-defer"}); err != nil {
				return err
			}
			deferred <- h.TaskID()
			if err := h.DeferUntil(ctx, func(context.Context) bool { return open.Load() }, time.Hour); err != nil {
				return err
			}
			resumedAttempt.Store(int32(h.Attempt()))
			return h.SetOutput(map[string]string{"local": local})
		}}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "quick", Tasks: []engine.Task{{Name: "q", Run: noop}}}))
	start(t, e.eng)
	ctx := context.Background()
	parked, err := e.eng.Enqueue(ctx, "parked", nil)
	require.NoError(t, err)
	var taskID int64
	select {
	case taskID = <-deferred:
	case <-time.After(20 * time.Second):
		t.Fatal("task did not start")
	}
	eventually(t, 10*time.Second, "task deferred", func() bool {
		tk, err := e.st.TaskGet(ctx, taskID)
		require.NoError(t, err)
		return tk.Status == store.StatusDeferred
	})
	// The only slot is free: quick work runs while the task is parked.
	for range 3 {
		q, err := e.eng.Enqueue(ctx, "quick", nil)
		require.NoError(t, err)
		require.Equal(t, store.RunCompleted, waitRun(t, e.st, q.ID, 10*time.Second).Status)
	}
	tk, err := e.st.TaskGet(ctx, taskID)
	require.NoError(t, err)
	require.Equal(t, store.StatusDeferred, tk.Status)
	require.NotNil(t, tk.WorkerID, "a deferred task keeps its worker and lease")
	require.JSONEq(t, `{"stage":"before-defer"}`, string(tk.Checkpoint))
	// The poll interval is an hour: only the signal can wake it.
	open.Store(true)
	require.NoError(t, e.eng.Signal(ctx, taskID))
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, parked.ID, 10*time.Second).Status)
	require.EqualValues(t, 1, resumedAttempt.Load())
	tk, _ = e.st.TaskGet(ctx, taskID)
	require.JSONEq(t, `{"local":"kept"}`, string(tk.Output))
	events, err := e.st.EventListByTask(ctx, taskID)
	require.NoError(t, err)
	var path []string
	for _, ev := range events {
		path = append(path, ev.To)
	}
	require.Equal(t, []string{"running", "deferred", "running", "completed"}, path, "the row records the creation; each move after it is an event")
}

func TestCancelWhileDeferredEndsCleanly(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}} })
	deferred := make(chan int64, 1)
	ended := make(chan error, 1)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "parked", Tasks: []engine.Task{{Name: "wait",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			deferred <- h.TaskID()
			err := h.DeferUntil(ctx, func(context.Context) bool { return false }, time.Hour)
			ended <- err
			return err
		}}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "quick", Tasks: []engine.Task{{Name: "q", Run: noop}}}))
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "parked", nil)
	require.NoError(t, err)
	taskID := <-deferred
	eventually(t, 10*time.Second, "task deferred", func() bool {
		tk, _ := e.st.TaskGet(ctx, taskID)
		return tk.Status == store.StatusDeferred
	})
	require.NoError(t, e.eng.CancelTask(ctx, taskID))
	select {
	case err := <-ended:
		require.True(t, errors.Is(err, context.Canceled))
	case <-time.After(10 * time.Second):
		t.Fatal("deferred handler was not cancelled")
	}
	require.Equal(t, store.RunCancelled, waitRun(t, e.st, run.ID, 10*time.Second).Status)
	// The slot is still usable: one slot, and quick work completes.
	for range 2 {
		q, err := e.eng.Enqueue(ctx, "quick", nil)
		require.NoError(t, err)
		require.Equal(t, store.RunCompleted, waitRun(t, e.st, q.ID, 10*time.Second).Status)
	}
}

func TestTimeoutDoesNotRunWhileDeferred(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var open atomic.Bool
	deferred := make(chan int64, 1)
	// Time spent running before DeferUntil counts; the timeout leaves room
	// for it on a busy machine.
	const timeout = 2 * time.Second
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Timeout: timeout,
		Retry: engine.RetryPolicy{MaxAttempts: 1},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			deferred <- h.TaskID()
			return h.DeferUntil(ctx, func(context.Context) bool { return open.Load() }, 20*time.Millisecond)
		}}}}))
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	id := <-deferred
	// Stay deferred for longer than the timeout (polled, not slept).
	parkedSince := time.Now()
	eventually(t, 10*time.Second, "deferred past the timeout", func() bool {
		tk, err := e.st.TaskGet(ctx, id)
		require.NoError(t, err)
		if tk.Status == store.StatusFailed && tk.LastError != nil {
			t.Fatalf("the task failed while deferred: %s", *tk.LastError)
		}
		return tk.Status == store.StatusDeferred && time.Since(parkedSince) > timeout+timeout/2
	})
	open.Store(true)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 10*time.Second).Status)
}

// The attempt's timeout stops when the handler calls DeferUntil, not when
// the park write commits: a park write that waits (here on a row lock the
// test holds; in production behind other parks of its batch, or on a
// loaded database) is the engine's time, not the handler's. Before, the
// timeout fired during such a write, the row went deferred and then at
// once failed.
func TestTimeoutDoesNotRunWhileParking(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) {
		// No heartbeat or rescue touches the row while the test locks it.
		c.HeartbeatInterval, c.LeaseDuration = time.Minute, 10*time.Minute
	})
	const timeout = time.Second
	var open atomic.Bool
	claimed := make(chan int64, 1)
	proceed := make(chan struct{})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Timeout: timeout,
		Retry: engine.RetryPolicy{MaxAttempts: 1},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			claimed <- h.TaskID()
			<-proceed
			return h.DeferUntil(ctx, func(context.Context) bool { return open.Load() }, 20*time.Millisecond)
		}}}}))
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	id := <-claimed
	// Hold the task's row so that the park write waits on it.
	tx, err := e.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`SELECT 1 FROM cairn.tasks WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	close(proceed)
	eventually(t, 10*time.Second, "the park write to wait on the row lock", func() bool {
		var n int
		require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%jsonb_to_recordset%'`).Scan(&n))
		return n > 0
	})
	// Keep it waiting for longer than the timeout (polled, not slept).
	blocked := time.Now()
	eventually(t, 10*time.Second, "the park write blocked past the timeout", func() bool {
		return time.Since(blocked) > 2*timeout
	})
	require.NoError(t, tx.Commit())
	eventually(t, 10*time.Second, "the task deferred", func() bool {
		tk, err := e.st.TaskGet(ctx, id)
		require.NoError(t, err)
		require.NotEqual(t, store.StatusFailed, tk.Status, "the task failed while parking: %v", tk.LastError)
		return tk.Status == store.StatusDeferred
	})
	open.Store(true)
	status := waitRun(t, e.st, run.ID, 10*time.Second).Status
	tk, err := e.st.TaskGet(ctx, id)
	require.NoError(t, err)
	if tk.LastError != nil {
		t.Fatalf("task %s with error: %s", tk.Status, *tk.LastError)
	}
	require.Equal(t, store.RunCompleted, status)
}

// Tasks parked in DeferUntil run no code of theirs: Shutdown interrupts
// them at once instead of waiting out the grace period for them (an hour
// here), and applies the interrupt rule to each.
func TestShutdownInterruptsDeferUntilParkedTasksWithoutTheGrace(t *testing.T) {
	t.Parallel()
	var graceOver <-chan struct{}
	e := setup(t, func(c *engine.Config) {
		c.ShutdownGrace = time.Hour
		c.Logger, graceOver = onLog(c.Logger, "grace period over: cancelling running handlers")
	})
	parked := make(chan int64, 2)
	park := func(ctx context.Context, h *engine.TaskHandle) error {
		parked <- h.TaskID()
		return h.DeferUntil(ctx, func(context.Context) bool { return false }, time.Hour)
	}
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{
		{Name: "requeue", Run: park, RequeueOnInterrupt: true},
		{Name: "park", Run: park},
	}}))
	ctx := context.Background()
	require.NoError(t, e.eng.Start(ctx))
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	<-parked
	<-parked
	eventually(t, 10*time.Second, "both tasks deferred", func() bool {
		return taskByName(t, e.st, run.ID, "requeue").Status == store.StatusDeferred &&
			taskByName(t, e.st, run.ID, "park").Status == store.StatusDeferred
	})
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, e.eng.Shutdown(stopCtx))
	require.NoError(t, stopCtx.Err(), "Shutdown ran until its context ended: it waited for the parked tasks")
	select {
	case <-graceOver:
		t.Fatal("Shutdown waited out the grace period for parked tasks")
	default:
	}
	require.Equal(t, store.StatusReady, taskByName(t, e.st, run.ID, "requeue").Status)
	require.Equal(t, store.StatusInterrupted, taskByName(t, e.st, run.ID, "park").Status)
}

// While Shutdown waits for running handlers it says so every few seconds,
// with how many there are and when the grace period ends.
func TestShutdownSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	var waiting <-chan struct{}
	e := setup(t, func(c *engine.Config) {
		c.ShutdownGrace = time.Minute
		c.Logger, waiting = onLog(c.Logger, "waiting for running handlers to return")
	})
	started, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "busy",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			close(started)
			<-release
			return nil
		}}}}))
	ctx := context.Background()
	require.NoError(t, e.eng.Start(ctx))
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	<-started
	done := make(chan error, 1)
	go func() { done <- e.eng.Shutdown(ctx) }()
	<-waiting
	close(release)
	require.NoError(t, <-done)
	require.Equal(t, store.StatusCompleted, taskByName(t, e.st, run.ID, "busy").Status, "the handler finished within the grace")
}

// A graceful stop is not a failed attempt: a parked task (MaxAttempts 2)
// whose engine is stopped gracefully three times still has its whole
// budget, its attempt number and budget agree (4 of 5), no stop is its
// last error, and it completes on the fourth start.
func TestGracefulStopsSpendNoAttempt(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var run int64
	for round := 1; round <= 4; round++ {
		cfg := fastConfig(db, t)
		cfg.ShutdownGrace = time.Hour // a parked task needs none of it
		eng := newEngine(t, db, cfg)
		started := make(chan int, 1)
		require.NoError(t, eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "park",
			RequeueOnInterrupt: true, Retry: engine.RetryPolicy{MaxAttempts: 2},
			Run: func(ctx context.Context, h *engine.TaskHandle) error {
				started <- h.Attempt()
				if h.Attempt() == 4 {
					return nil
				}
				return h.DeferUntil(ctx, func(context.Context) bool { return false }, time.Hour)
			}}}}))
		require.NoError(t, eng.Start(ctx))
		if round == 1 {
			r, err := eng.Enqueue(ctx, "w", nil)
			require.NoError(t, err)
			run = r.ID
		}
		require.Equal(t, round, <-started)
		if round == 4 {
			waitRun(t, newStore(t, db, ""), run, 10*time.Second)
			require.NoError(t, eng.Shutdown(ctx))
			break
		}
		eventually(t, 10*time.Second, "the task parked", func() bool {
			return taskByName(t, newStore(t, db, ""), run, "park").Status == store.StatusDeferred
		})
		require.NoError(t, eng.Shutdown(ctx))
		tk := taskByName(t, newStore(t, db, ""), run, "park")
		require.Equal(t, store.StatusReady, tk.Status)
		require.Equal(t, round, tk.Attempt)
		require.Equal(t, round+2, tk.MaxAttempts, "the stopped attempt is given back to the budget")
		require.Nil(t, tk.LastError, "a graceful stop is no error of the task")
	}
	tk := taskByName(t, newStore(t, db, ""), run, "park")
	require.Equal(t, store.StatusCompleted, tk.Status)
	require.Equal(t, 4, tk.Attempt)
	require.Equal(t, 5, tk.MaxAttempts)
	var stops int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.task_events WHERE task_id = $1 AND from_status = 'deferred'
		AND to_status = 'ready' AND error LIKE 'interrupted by shutdown%'`, tk.ID).Scan(&stops))
	require.Equal(t, 3, stops, "each stop is on the task's history, as such")
}
