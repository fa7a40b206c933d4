package engine_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func noop(context.Context, *engine.TaskHandle) error { return nil }

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	eng, err := engine.New(db.SQL, engine.Config{})
	require.NoError(t, err)
	cfg := engine.ConfigOf(eng)
	require.Equal(t, "cairn", cfg.Schema)
	require.Equal(t, map[string]engine.QueueConfig{"default": {Slots: 4}}, cfg.Queues)
	require.Equal(t, time.Second, cfg.PollInterval)
	require.Equal(t, 5*time.Second, cfg.HeartbeatInterval)
	require.Equal(t, 30*time.Second, cfg.LeaseDuration)
	require.Equal(t, 25*time.Second, cfg.ShutdownGrace)
	require.Equal(t, 5*time.Minute, cfg.TaskTimeout)
	require.Equal(t, 1<<20, cfg.MaxInputBytes)
	require.Equal(t, 30*24*time.Hour, cfg.Retention)
	p := engine.RetryPolicy{}
	require.Equal(t, time.Second, p.Delay(1))
	require.Equal(t, 2*time.Second, p.Delay(2))
	require.Equal(t, 4*time.Second, p.Delay(3))
	require.Equal(t, time.Hour, p.Delay(40))
}

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cases := map[string]engine.Config{
		"LeaseDuration": {HeartbeatInterval: 10 * time.Second, LeaseDuration: 5 * time.Second},
		"Queues":        {Queues: map[string]engine.QueueConfig{"bad name!": {}}},
		"PollInterval":  {PollInterval: -time.Second},
		"Schema":        {Schema: "Robert'); DROP TABLE"},
	}
	for field, cfg := range cases {
		_, err := engine.New(db.SQL, cfg)
		require.ErrorIs(t, err, engine.ErrInvalidConfig, field)
		require.Contains(t, err.Error(), field)
	}
}

func TestRegisterRejectsBadWorkflows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	eng, err := engine.New(db.SQL, engine.Config{})
	require.NoError(t, err)
	cases := []struct {
		wf   engine.Workflow
		want string
	}{
		{engine.Workflow{Name: "cyc", Tasks: []engine.Task{{Name: "a", Deps: []string{"b"}, Run: noop}, {Name: "b", Deps: []string{"a"}, Run: noop}}}, "a -> b -> a"},
		{engine.Workflow{Name: "unk", Tasks: []engine.Task{{Name: "a", Deps: []string{"zz"}, Run: noop}}}, `unknown task "zz"`},
		{engine.Workflow{Name: "dup", Tasks: []engine.Task{{Name: "a", Run: noop}, {Name: "a", Run: noop}}}, `duplicate task name "a"`},
		{engine.Workflow{Name: "", Tasks: []engine.Task{{Name: "a", Run: noop}}}, "name"},
		{engine.Workflow{Name: "empty-task", Tasks: []engine.Task{{Name: "", Run: noop}}}, "name"},
		{engine.Workflow{Name: "norun", Tasks: []engine.Task{{Name: "a"}}}, "no Run handler"},
		{engine.Workflow{Name: "notasks"}, "no tasks"},
		{engine.Workflow{Name: "badrule", Tasks: []engine.Task{{Name: "a", Run: noop}, {Name: "b", Run: noop, Trigger: engine.All(engine.Succeeded("x"))}}}, `unknown task`},
	}
	for _, c := range cases {
		err := eng.Register(c.wf)
		require.ErrorIs(t, err, engine.ErrInvalidWorkflow, c.wf.Name)
		require.Contains(t, err.Error(), c.want, c.wf.Name)
	}
	// A longer cycle is named in full.
	err = eng.Register(engine.Workflow{Name: "cyc3", Tasks: []engine.Task{
		{Name: "a", Deps: []string{"c"}, Run: noop}, {Name: "b", Deps: []string{"a"}, Run: noop}, {Name: "c", Deps: []string{"b"}, Run: noop}}})
	require.ErrorIs(t, err, engine.ErrInvalidWorkflow)
	require.Contains(t, err.Error(), "a -> b -> c -> a")

	ok := engine.Workflow{Name: "ok", Tasks: []engine.Task{{Name: "a", Run: noop}}}
	require.NoError(t, eng.Register(ok))
	require.NoError(t, eng.Register(ok), "same shape twice is fine")
	changed := engine.Workflow{Name: "ok", Tasks: []engine.Task{{Name: "a", Run: noop}, {Name: "b", Run: noop}}}
	require.ErrorIs(t, eng.Register(changed), engine.ErrInvalidWorkflow)
}

func TestEnqueueRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.MaxInputBytes = 64 })
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}}}))
	ctx := context.Background()
	_, err := e.eng.Enqueue(ctx, "nope", nil)
	require.ErrorIs(t, err, engine.ErrUnknownWorkflow)
	require.EqualError(t, err, `unknown workflow "nope"; known workflows: w`, "the error lists the known workflows")
	_, err = e.eng.Enqueue(ctx, "w", json.RawMessage(`[1,2]`))
	require.ErrorIs(t, err, engine.ErrInvalidInput)
	_, err = e.eng.Enqueue(ctx, "w", json.RawMessage(`{"a":`))
	require.ErrorIs(t, err, engine.ErrInvalidInput)
	_, err = e.eng.Enqueue(ctx, "w", map[string]string{"big": string(make([]byte, 100))})
	require.ErrorIs(t, err, engine.ErrInputTooLarge)
	_, err = e.eng.EnqueueMany(ctx, []engine.EnqueueParams{{Workflow: "w"}, {Workflow: "nope"}})
	require.ErrorIs(t, err, engine.ErrUnknownWorkflow)
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs`).Scan(&n))
	require.Zero(t, n)
}

// attemptGaps returns, per attempt after the first, the time between the
// failure event and the next claim.
func attemptGaps(t *testing.T, st *store.Store, taskID int64) (attempts int, gaps []time.Duration) {
	t.Helper()
	events, err := st.EventListByTask(context.Background(), taskID)
	require.NoError(t, err)
	var failedAt time.Time
	for _, ev := range events {
		if ev.From != nil && *ev.From == store.StatusRunning && ev.To == store.StatusReady {
			failedAt = ev.At
		}
		if ev.To == store.StatusRunning && ev.From != nil && *ev.From == store.StatusReady {
			attempts++
			if !failedAt.IsZero() {
				gaps = append(gaps, ev.At.Sub(failedAt))
			}
		}
	}
	return attempts, gaps
}

func TestRetryBackoffThenSuccess(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var calls atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "flaky", Tasks: []engine.Task{{
		Name:  "f",
		Retry: engine.RetryPolicy{MaxAttempts: 5, InitialDelay: 300 * time.Millisecond, BackoffFactor: 2, NoJitter: true},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			if calls.Add(1) <= 2 {
				h.Logger().Info("failing on purpose", "attempt", h.Attempt())
				return fmt.Errorf("flaky failure %d", h.Attempt())
			}
			return h.SetOutput(map[string]int{"attempt": h.Attempt()})
		},
	}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "flaky", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	task := taskByName(t, e.st, run.ID, "f")
	require.Equal(t, 3, task.Attempt)
	attempts, gaps := attemptGaps(t, e.st, task.ID)
	require.Equal(t, 3, attempts)
	require.Len(t, gaps, 2)
	require.GreaterOrEqual(t, gaps[0], 300*time.Millisecond)
	require.GreaterOrEqual(t, gaps[1], 600*time.Millisecond)
	// Each failed attempt kept its error and its log.
	events, err := e.st.EventListByTask(context.Background(), task.ID)
	require.NoError(t, err)
	var errs []string
	for _, ev := range events {
		if ev.Error != nil {
			errs = append(errs, *ev.Error)
			require.Contains(t, string(ev.Detail), "failing on purpose")
		}
	}
	require.Equal(t, []string{"flaky failure 1", "flaky failure 2"}, errs)
}

func TestPermanentErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "perm", Tasks: []engine.Task{
		{Name: "p", Retry: engine.RetryPolicy{MaxAttempts: 5}, Run: func(context.Context, *engine.TaskHandle) error {
			return engine.Permanent(errors.New("bad data"))
		}},
		{Name: "after", Deps: []string{"p"}, Run: noop},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "perm", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	p := taskByName(t, e.st, run.ID, "p")
	require.Equal(t, store.StatusFailed, p.Status)
	require.Equal(t, 1, p.Attempt)
	require.Contains(t, *p.LastError, "bad data")
	require.Equal(t, store.StatusSkipped, taskByName(t, e.st, run.ID, "after").Status)
}

func TestPanicIsAFailedAttemptWithStack(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "panics", Tasks: []engine.Task{
		{Name: "p", Retry: engine.RetryPolicy{MaxAttempts: 1}, Run: func(context.Context, *engine.TaskHandle) error {
			var m map[string]int
			m["boom"] = 1 // nil map write panics
			return nil
		}},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "panics", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	p := taskByName(t, e.st, run.ID, "p")
	events, err := e.st.EventListByTask(context.Background(), p.ID)
	require.NoError(t, err)
	last := events[len(events)-1]
	require.Equal(t, store.StatusFailed, last.To)
	require.Contains(t, *last.Error, "panic")
	require.Contains(t, string(last.Detail), "goroutine")
}

func TestTimeoutCountsAsFailedAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var calls atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "slow", Tasks: []engine.Task{{
		Name: "s", Timeout: 200 * time.Millisecond,
		Retry: engine.RetryPolicy{MaxAttempts: 2, InitialDelay: 10 * time.Millisecond},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			calls.Add(1)
			<-ctx.Done()
			return ctx.Err()
		},
	}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "slow", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	s := taskByName(t, e.st, run.ID, "s")
	require.Equal(t, 2, s.Attempt)
	require.EqualValues(t, 2, calls.Load())
	require.Contains(t, *s.LastError, "timeout")
}

func TestRetryAfterAndRetryOn(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var calls atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "ra", Tasks: []engine.Task{
		{Name: "later", Retry: engine.RetryPolicy{MaxAttempts: 2, InitialDelay: time.Hour},
			Run: func(ctx context.Context, h *engine.TaskHandle) error {
				if calls.Add(1) == 1 {
					return engine.RetryAfter(50*time.Millisecond, errors.New("rate limited"))
				}
				return nil
			}},
		{Name: "picky", Retry: engine.RetryPolicy{MaxAttempts: 5, RetryOn: []string{"temporary"}},
			Run: func(ctx context.Context, h *engine.TaskHandle) error { return errors.New("fatal: disk gone") }},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "ra", nil)
	require.NoError(t, err)
	waitRun(t, e.st, run.ID, 20*time.Second)
	require.Equal(t, store.StatusCompleted, taskByName(t, e.st, run.ID, "later").Status)
	picky := taskByName(t, e.st, run.ID, "picky")
	require.Equal(t, store.StatusFailed, picky.Status)
	require.Equal(t, 1, picky.Attempt, "an error that does not match RetryOn is not retried")
}

func TestIdempotencyUnderConcurrentEnqueues(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}}}))
	var wg sync.WaitGroup
	ids := make([]int64, 20)
	errs := make([]error, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.eng.Enqueue(context.Background(), "w", map[string]int{"i": i}, engine.WithKey("order:42"))
			errs[i] = err
			if err == nil {
				ids[i] = r.ID
			}
		}()
	}
	wg.Wait()
	for i := range ids {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestEnqueueTxRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}, {Name: "b", Deps: []string{"a"}, Run: noop}}}))
	ctx := context.Background()
	tx, err := e.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	run, err := e.eng.EnqueueTx(ctx, tx, "w", map[string]int{"x": 1})
	require.NoError(t, err)
	require.NotZero(t, run.ID)
	require.NoError(t, tx.Rollback())
	for _, table := range []string{"runs", "tasks", "task_events"} {
		var n int
		require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.`+table).Scan(&n))
		require.Zero(t, n, table)
	}
	// And a committed one is there.
	tx, err = e.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	run, err = e.eng.EnqueueTx(ctx, tx, "w", nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	_, err = e.st.RunGet(ctx, run.ID)
	require.NoError(t, err)
}

// maxRunningPerWorker replays task_events in id order and returns the
// largest number of tasks any worker held running at once.
func maxRunningPerWorker(t *testing.T, db *sql.DB) map[int64]int {
	t.Helper()
	rows, err := db.Query(`SELECT task_id, coalesce(from_status, ''), to_status, coalesce(worker_id, 0) FROM cairn.task_events ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	running := map[int64]map[int64]bool{}
	holder := map[int64]int64{}
	peak := map[int64]int{}
	for rows.Next() {
		var task, worker int64
		var from, to string
		require.NoError(t, rows.Scan(&task, &from, &to, &worker))
		if to == store.StatusRunning {
			if running[worker] == nil {
				running[worker] = map[int64]bool{}
			}
			running[worker][task] = true
			holder[task] = worker
			peak[worker] = max(peak[worker], len(running[worker]))
		} else if from == store.StatusRunning {
			delete(running[holder[task]], task)
		}
	}
	require.NoError(t, rows.Err())
	return peak
}

func TestFourEnginesRunEachTaskOnceWithinSlots(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long")
	}
	db := pgtest.New(t)
	const total = 4000
	var execs sync.Map
	var dup atomic.Int32
	handler := func(ctx context.Context, h *engine.TaskHandle) error {
		if _, loaded := execs.LoadOrStore(h.TaskID(), true); loaded {
			dup.Add(1)
		}
		return nil
	}
	var engines []*engine.Engine
	for i := range 4 {
		cfg := fastConfig(db, t)
		cfg.WorkerName = fmt.Sprintf("engine-%d", i)
		// Exactly-once under normal operation: a lease that load on a
		// 2-core machine cannot make expire (rescue has its own tests).
		cfg.LeaseDuration = time.Minute
		cfg.Queues = map[string]engine.QueueConfig{"default": {Slots: 8}}
		eng := newEngine(t, db, cfg)
		require.NoError(t, eng.Register(engine.Workflow{Name: "one", Tasks: []engine.Task{{Name: "t", Run: handler}}}))
		engines = append(engines, eng)
	}
	ctx := context.Background()
	batch := make([]engine.EnqueueParams, 1000)
	for i := range batch {
		batch[i] = engine.EnqueueParams{Workflow: "one"}
	}
	for i := 0; i < total; i += len(batch) {
		_, err := engines[0].EnqueueMany(ctx, batch)
		require.NoError(t, err)
	}
	for _, eng := range engines {
		start(t, eng)
	}
	st := newStore(t, db, "")
	eventually(t, 3*time.Minute, "all tasks to complete", func() bool {
		var n int
		require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE status = 'completed'`).Scan(&n))
		return n == total
	})
	_ = st
	require.Zero(t, dup.Load(), "a task ran twice")
	count := 0
	execs.Range(func(_, _ any) bool { count++; return true })
	require.Equal(t, total, count)
	var attempts int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.task_events WHERE to_status = 'running'`).Scan(&attempts))
	require.Equal(t, total, attempts, "each task claimed exactly once")
	peaks := maxRunningPerWorker(t, db.SQL)
	require.Len(t, peaks, 4, "every engine worked")
	for w, p := range peaks {
		require.LessOrEqual(t, p, 8, "worker %d ran more tasks than its slots", w)
	}
}

func TestCancelReachesHandlerInAnotherEngine(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	started := make(chan int64, 1)
	stopped := make(chan error, 1)
	worker := newEngine(t, db, fastConfig(db, t))
	require.NoError(t, worker.Register(engine.Workflow{Name: "long", Tasks: []engine.Task{{Name: "wait",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			started <- h.TaskID()
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return ctx.Err()
		}}}}))
	start(t, worker)
	cfg := fastConfig(db, t)
	cfg.NoWorker = true
	admin := newEngine(t, db, cfg)
	require.NoError(t, admin.Register(engine.Workflow{Name: "long", Tasks: []engine.Task{{Name: "wait", Run: noop}}}))
	start(t, admin)

	run, err := admin.Enqueue(context.Background(), "long", nil)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("handler did not start")
	}
	require.NoError(t, admin.CancelRun(context.Background(), run.ID))
	select {
	case cause := <-stopped:
		require.ErrorIs(t, cause, engine.ErrTaskLost)
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not reach the handler")
	}
	require.Equal(t, store.RunCancelled, waitRun(t, newStore(t, db, ""), run.ID, 10*time.Second).Status)
	task := taskByName(t, newStore(t, db, ""), run.ID, "wait")
	require.Equal(t, store.StatusCancelled, task.Status)
}

func TestTriggerRules(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	fail := func(context.Context, *engine.TaskHandle) error { return engine.Permanent(errors.New("no")) }
	out := func(v map[string]any) engine.Handler {
		return func(_ context.Context, h *engine.TaskHandle) error { return h.SetOutput(v) }
	}
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "rules", Tasks: []engine.Task{
		{Name: "ok", Run: out(map[string]any{"score": 7, "tags": []string{"x", "y"}})},
		{Name: "bad", Run: fail},
		{Name: "all_success", Deps: []string{"ok", "bad"}, Run: noop},
		{Name: "after_skip", Deps: []string{"all_success"}, Run: noop}, // skip propagates
		{Name: "all_done", Deps: []string{"ok", "bad"}, Trigger: engine.AllDone, Run: noop},
		{Name: "one_failed", Deps: []string{"ok", "bad"}, Trigger: engine.OneFailed, Run: noop},
		{Name: "none_failed", Deps: []string{"ok", "bad"}, Trigger: engine.NoneFailed, Run: noop},
		{Name: "none_failed_skip", Deps: []string{"ok", "all_success"}, Trigger: engine.NoneFailed, Run: noop},
		{Name: "ctx_gt", Deps: []string{"ok"}, Trigger: engine.All(engine.Succeeded("ok"), engine.Context("score", "gt", 5)), Run: noop},
		{Name: "ctx_lt", Deps: []string{"ok"}, Trigger: engine.All(engine.Context("score", "lt", 5)), Run: noop},
		{Name: "ctx_contains", Deps: []string{"ok"}, Trigger: engine.Any(engine.Context("tags", "contains", "y"), engine.Context("missing", "exists", nil)), Run: noop},
		{Name: "ctx_input", Deps: []string{"ok"}, Trigger: engine.None(engine.Context("mode", "eq", "dry-run")), Run: noop},
		{Name: "skipped_dep", Deps: []string{"all_success"}, Trigger: engine.All(engine.Skipped("all_success")), Run: noop},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "rules", map[string]string{"mode": "dry-run"})
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	want := map[string]string{
		"ok": "completed", "bad": "failed", "all_success": "skipped", "after_skip": "skipped",
		"all_done": "completed", "one_failed": "completed", "none_failed": "skipped", "none_failed_skip": "completed",
		"ctx_gt": "completed", "ctx_lt": "skipped", "ctx_contains": "completed", "ctx_input": "skipped",
		"skipped_dep": "completed",
	}
	tasks, err := e.st.TaskListByRun(context.Background(), run.ID)
	require.NoError(t, err)
	got := map[string]string{}
	for _, tk := range tasks {
		got[tk.Name] = tk.Status
	}
	require.Equal(t, want, got)
}

func TestPauseResumeRunAndQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var ran atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run: func(context.Context, *engine.TaskHandle) error { ran.Add(1); return nil }}}}))
	ctx := context.Background()
	require.NoError(t, e.eng.Start(ctx))
	t.Cleanup(func() { _ = e.eng.Shutdown(context.Background()) })
	require.NoError(t, e.eng.PauseQueue(ctx, "default"))
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	require.NoError(t, e.eng.PauseRun(ctx, run.ID))
	require.NoError(t, e.eng.ResumeQueue(ctx, "default"))
	r, err := e.st.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunPaused, r.Status)
	require.Zero(t, ran.Load())
	require.NoError(t, e.eng.ResumeRun(ctx, run.ID))
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	require.ErrorIs(t, e.eng.PauseQueue(ctx, "no-such-queue"), engine.ErrNotFound)
	require.ErrorIs(t, e.eng.PauseRun(ctx, 999999), engine.ErrNotFound)
}

func TestAdminRetryReopensSkippedDependents(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var fail atomic.Bool
	fail.Store(true)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{
		{Name: "a", Retry: engine.RetryPolicy{MaxAttempts: 1}, Run: func(context.Context, *engine.TaskHandle) error {
			if fail.Load() {
				return errors.New("down")
			}
			return nil
		}},
		{Name: "b", Deps: []string{"a"}, Run: noop},
		{Name: "c", Deps: []string{"b"}, Run: noop},
	}}))
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	a := taskByName(t, e.st, run.ID, "a")
	require.ErrorIs(t, e.eng.RequeueTask(ctx, a.ID), engine.ErrInvalidState, "a failed task is not interrupted")
	fail.Store(false)
	require.NoError(t, e.eng.RetryTask(ctx, a.ID))
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	require.Equal(t, store.StatusCompleted, taskByName(t, e.st, run.ID, "c").Status)
	require.Equal(t, 2, taskByName(t, e.st, run.ID, "a").Attempt)
	require.ErrorIs(t, e.eng.RetryTask(ctx, a.ID), engine.ErrInvalidState)
	require.ErrorIs(t, e.eng.RetryTask(ctx, 987654), engine.ErrNotFound)
}

func TestSubscribeSeesCommittedTransitions(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}}}))
	events, cancel := e.eng.Subscribe(100)
	defer cancel()
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "w", nil)
	require.NoError(t, err)
	var seen []string
	timeout := time.After(20 * time.Second)
	for len(seen) < 3 {
		select {
		case ev := <-events:
			if ev.RunID == run.ID {
				seen = append(seen, ev.From+">"+ev.To)
			}
		case <-timeout:
			t.Fatalf("saw only %v", seen)
		}
	}
	sort.Strings(seen)
	require.Equal(t, []string{">ready", "ready>running", "running>completed"}, seen)
}

// Statements announce events only while an engine has subscribers: the
// engine keeps its event_listeners row from Subscribe until its last
// subscriber leaves (at the next registration pass) or it shuts down.
func TestSubscribersMakeStatementsAnnounceEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}}}))
	start(t, e.eng)
	listened := func() bool {
		t.Helper()
		ok, err := e.st.EventsListened(ctx)
		require.NoError(t, err)
		return ok
	}
	require.False(t, listened(), "no subscriber, no announcing")

	events, cancel := e.eng.Subscribe(100)
	require.True(t, listened(), "Subscribe returns after the row is written")
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	select {
	case ev := <-events:
		require.Equal(t, run.ID, ev.RunID)
	case <-time.After(20 * time.Second):
		t.Fatal("no event after Subscribe")
	}
	logs, cancelLogs := e.eng.SubscribeLogs(10)
	cancel()
	require.NoError(t, engine.ListeningRunOnce(ctx, e.eng))
	require.True(t, listened(), "a log subscriber is left")
	cancelLogs()
	_, open := <-logs
	require.False(t, open)
	require.NoError(t, engine.ListeningRunOnce(ctx, e.eng))
	require.False(t, listened(), "the last subscriber left")

	_, cancel = e.eng.Subscribe(100)
	defer cancel()
	require.True(t, listened())
	require.NoError(t, e.eng.Shutdown(ctx))
	require.False(t, listened(), "Shutdown drops the row")
}

func TestAdminRefusesFinishedRunsAndTasks(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run: func(context.Context, *engine.TaskHandle) error { return nil }}}}))
	ctx := context.Background()
	start(t, e.eng)
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	before, err := e.st.RunGet(ctx, run.ID)
	require.NoError(t, err)
	a := taskByName(t, e.st, run.ID, "a")

	for verb, act := range map[string]func(context.Context, int64) error{
		"cancelled": e.eng.CancelRun, "paused": e.eng.PauseRun, "resumed": e.eng.ResumeRun,
	} {
		err := act(ctx, run.ID)
		require.ErrorIs(t, err, engine.ErrInvalidState, verb)
		require.ErrorContains(t, err, fmt.Sprintf("run %d is completed; only an unfinished run can be %s", run.ID, verb))
	}
	err = e.eng.RetryTask(ctx, a.ID)
	require.ErrorIs(t, err, engine.ErrInvalidState)
	require.ErrorContains(t, err, fmt.Sprintf("task %d is completed; only a failed or cancelled task can be retried", a.ID))
	require.NotContains(t, err.Error(), "[", "no Go slice in the message")
	err = e.eng.RequeueTask(ctx, a.ID)
	require.ErrorContains(t, err, fmt.Sprintf("task %d is completed; only an interrupted task can be requeued", a.ID))
	err = e.eng.CancelTask(ctx, a.ID)
	require.ErrorIs(t, err, engine.ErrInvalidState)
	require.ErrorContains(t, err, fmt.Sprintf("task %d is completed; only an unfinished task can be cancelled", a.ID))

	after, err := e.st.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, before.Status, after.Status)
	require.Equal(t, before.Paused, after.Paused)
	require.Equal(t, before.UpdatedAt, after.UpdatedAt, "a refused action writes nothing")
	require.Equal(t, store.StatusCompleted, taskByName(t, e.st, run.ID, "a").Status)

	require.ErrorIs(t, e.eng.CancelRun(ctx, 999999), engine.ErrNotFound)
	require.ErrorIs(t, e.eng.CancelTask(ctx, 999999), engine.ErrNotFound)
}

func TestPauseAndResumeRunAreIdempotent(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.NoWorker = true })
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run: func(context.Context, *engine.TaskHandle) error { return nil }}}}))
	ctx := context.Background()
	start(t, e.eng)
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	// Resuming a run that is not paused, and pausing a paused one, succeed
	// and leave it as it is.
	require.NoError(t, e.eng.ResumeRun(ctx, run.ID))
	r, err := e.st.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunPending, r.Status)
	require.NoError(t, e.eng.PauseRun(ctx, run.ID))
	require.NoError(t, e.eng.PauseRun(ctx, run.ID))
	r, err = e.st.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunPaused, r.Status)
	// An unfinished run can be cancelled, once.
	require.NoError(t, e.eng.CancelRun(ctx, run.ID))
	require.ErrorIs(t, e.eng.CancelRun(ctx, run.ID), engine.ErrInvalidState)
	r, err = e.st.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunCancelled, r.Status)
}

// An enqueue concurrent with another is announced after its commit, with
// the others that committed meanwhile (see waker): every run starts
// without waiting for the poll (an hour here). Rounds of two concurrent
// enqueues, each round waiting for its runs, leave no running task whose
// completion could claim a run whose announcement was lost.
func TestConcurrentEnqueuesAreAllWoken(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.PollInterval = time.Hour })
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}}}))
	start(t, e.eng)
	for round := range 30 {
		runs := make([]*engine.Run, 2)
		var wg sync.WaitGroup
		for i := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.eng.Enqueue(context.Background(), "w", nil)
				assert.NoError(t, err)
				runs[i] = r
			}()
		}
		wg.Wait()
		for _, r := range runs {
			require.NotNil(t, r)
			require.Equal(t, store.RunCompleted, waitRun(t, e.st, r.ID, 10*time.Second).Status, "round %d", round)
		}
	}
	require.Positive(t, engine.QuietEnqueues(e.eng), "some enqueues were announced after their commit")
}
