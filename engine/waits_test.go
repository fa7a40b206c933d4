package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// offsetClock is an engine clock the test moves forward: a durable wait
// of an hour passes at once.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time            { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) advance(d time.Duration)   { c.off.Add(int64(d)) }
func (c *offsetClock) config(cfg *engine.Config) { cfg.Clock = c.now }

// steps returns the journal of a task: name -> result.
func steps(t testing.TB, e env, taskID int64) map[string]string {
	t.Helper()
	list, err := e.st.TaskStepList(context.Background(), taskID)
	require.NoError(t, err)
	out := map[string]string{}
	for _, s := range list {
		out[s.Name] = string(s.Result)
	}
	return out
}

// durableWait is a row of cairn_durable_waits.
type durableWait struct {
	kind, name string
	until      *time.Time
}

func durableWaitOf(t testing.TB, e env, taskID int64) (durableWait, bool) {
	t.Helper()
	var w durableWait
	var name *string
	err := e.db.SQL.QueryRow(`SELECT kind, name, until FROM cairn.cairn_durable_waits WHERE task_id = $1`, taskID).Scan(&w.kind, &name, &w.until)
	if err != nil {
		return w, false
	}
	if name != nil {
		w.name = *name
	}
	return w, true
}

func onlyTask(t testing.TB, e env, runID int64) store.Task {
	t.Helper()
	tasks, err := e.st.TaskListByRun(context.Background(), runID)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	return tasks[0]
}

func TestStepReplaysJournaledResultsAndSkipsFailedOnes(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var callsA, callsB atomic.Int64
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "steps", Tasks: []engine.Task{{Name: "only",
		Retry: engine.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Millisecond, NoJitter: true},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			a, err := engine.Step(ctx, h, "a", func(context.Context) (int, error) { return 40 + int(callsA.Add(1)), nil })
			if err != nil {
				return err
			}
			b, err := engine.Step(ctx, h, "b", func(context.Context) (string, error) {
				if callsB.Add(1) == 1 {
					return "", errors.New("b failed")
				}
				return fmt.Sprintf("b@%d", h.Attempt()), nil
			})
			if err != nil {
				return err
			}
			// The same name again returns the journaled result.
			again, err := engine.Step(ctx, h, "a", func(context.Context) (int, error) { return -1, nil })
			if err != nil {
				return err
			}
			return h.SetOutput(map[string]any{"a": a, "b": b, "again": again})
		}}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "steps", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 30*time.Second).Status)

	tk := onlyTask(t, e, run.ID)
	require.Equal(t, 2, tk.Attempt, "b's failure retried the task")
	require.Equal(t, int64(1), callsA.Load(), "the second attempt got a's result from the journal")
	require.Equal(t, int64(2), callsB.Load(), "a failed step is not journaled: it ran again")
	require.JSONEq(t, `{"a": 41, "b": "b@2", "again": 41}`, string(tk.Output))
	require.Equal(t, map[string]string{"a": "41", "b": `"b@2"`}, steps(t, e, tk.ID))
}

func TestStepOfALostTaskJournalsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	got := make(chan error, 1)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "lost", Tasks: []engine.Task{{Name: "only",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			_, err := engine.Step(ctx, h, "taken", func(context.Context) (int, error) {
				// Another worker takes the row meanwhile (as a rescue after
				// a lease ran out would), unannounced.
				_, err := e.db.SQL.Exec(`UPDATE cairn.tasks SET worker_id = worker_id + 1000 WHERE id = $1`, h.TaskID())
				return 1, err
			})
			got <- err
			return err
		}}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "lost", nil)
	require.NoError(t, err)
	select {
	case err := <-got:
		require.ErrorIs(t, err, engine.ErrTaskLost)
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
	require.Empty(t, steps(t, e, onlyTask(t, e, run.ID).ID), "a lost task journals nothing")
}

func TestStepRefusesBadNames(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	got := make(chan error, 2)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "names", Tasks: []engine.Task{{Name: "only",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			for _, name := range []string{"", "cairn:sleep#1"} {
				_, err := engine.Step(ctx, h, name, func(context.Context) (int, error) { return 1, nil })
				got <- err
			}
			return nil
		}}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "names", nil)
	require.NoError(t, err)
	for range 2 {
		select {
		case err := <-got:
			require.ErrorIs(t, err, engine.ErrInvalidInput)
		case <-time.After(30 * time.Second):
			t.Fatal("the handler never ran")
		}
	}
	waitRun(t, e.st, run.ID, 30*time.Second)
	require.Empty(t, steps(t, e, onlyTask(t, e, run.ID).ID))
}

func TestSleepParksWithoutASlotAndResumes(t *testing.T) {
	t.Parallel()
	var clock offsetClock
	e := setup(t, func(c *engine.Config) {
		clock.config(c)
		c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}}
	})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "sleepy", Tasks: []engine.Task{{Name: "only",
		Run: func(ctx context.Context, h *engine.TaskHandle) error { return h.Sleep(ctx, time.Hour) }}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "quick", Tasks: []engine.Task{{Name: "only",
		Run: func(ctx context.Context, h *engine.TaskHandle) error { return nil }}}}))
	start(t, e.eng)
	ctx := context.Background()
	sleepy, err := e.eng.Enqueue(ctx, "sleepy", nil)
	require.NoError(t, err)
	tk := onlyTask(t, e, sleepy.ID)
	var w durableWait
	eventually(t, 30*time.Second, "the sleep to show in cairn_durable_waits", func() bool {
		var ok bool
		w, ok = durableWaitOf(t, e, tk.ID)
		return ok
	})
	require.Equal(t, store.WaitKindSleep, w.kind)
	require.NotNil(t, w.until)
	require.WithinDuration(t, clock.now().Add(time.Hour), *w.until, time.Minute)

	// The one slot is free: another task runs meanwhile.
	quick, err := e.eng.Enqueue(ctx, "quick", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, quick.ID, 30*time.Second).Status)
	require.Equal(t, store.StatusDeferred, onlyTask(t, e, sleepy.ID).Status)

	// The hour passes; a signal makes it look at the clock now.
	clock.advance(time.Hour)
	require.NoError(t, e.eng.Signal(ctx, tk.ID))
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, sleepy.ID, 30*time.Second).Status)
	_, waiting := durableWaitOf(t, e, tk.ID)
	require.False(t, waiting, "the wait ended with the sleep")
	require.Equal(t, 1, onlyTask(t, e, sleepy.ID).Attempt)
}

func TestSleepAfterShutdownGoesBackToReadyAndSleepsWhatIsLeft(t *testing.T) {
	t.Parallel()
	var clock offsetClock
	logger, graceOver := onLog(testLogger(t), "grace period over: cancelling running handlers")
	e := setup(t, func(c *engine.Config) {
		clock.config(c)
		c.Logger = logger
		c.ShutdownGrace = time.Hour
	})
	var calls atomic.Int64
	handler := func(ctx context.Context, h *engine.TaskHandle) error {
		n, err := engine.Step(ctx, h, "one", func(context.Context) (int64, error) { return calls.Add(1), nil })
		if err != nil {
			return err
		}
		if err := h.Sleep(ctx, time.Hour); err != nil {
			return err
		}
		return h.SetOutput(map[string]int64{"one": n})
	}
	// Not RequeueOnInterrupt: a task parked in a durable wait goes back
	// to ready all the same.
	wf := engine.Workflow{Name: "sleepy", Tasks: []engine.Task{{Name: "only", Run: handler}}}
	require.NoError(t, e.eng.Register(wf))
	require.NoError(t, e.eng.Start(context.Background()))
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "sleepy", nil)
	require.NoError(t, err)
	tk := onlyTask(t, e, run.ID)
	eventually(t, 30*time.Second, "the task to sleep", func() bool { _, ok := durableWaitOf(t, e, tk.ID); return ok })
	wake := steps(t, e, tk.ID)["cairn:sleep#1"]
	require.NotEmpty(t, wake)

	// ShutdownGrace is an hour: a sleeping task needs none, it is
	// cancelled at once (the handler returns before the grace is over).
	shutCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, e.eng.Shutdown(shutCtx))
	select {
	case <-graceOver:
		t.Fatal("shutdown waited out its grace period for a sleeping task")
	default:
	}
	tk = onlyTask(t, e, run.ID)
	require.Equal(t, store.StatusReady, tk.Status)
	require.Nil(t, tk.WaitKind, "the wait is cleared off the row")

	// Half the hour passes; a new engine replays step one and sleeps
	// the half hour left, not a new hour.
	clock.advance(30 * time.Minute)
	e2 := newEngine(t, e.db, func() engine.Config { c := fastConfig(e.db, t); clock.config(&c); return c }())
	require.NoError(t, e2.Register(wf))
	start(t, e2)
	eventually(t, 30*time.Second, "the second attempt to sleep", func() bool {
		tk = onlyTask(t, e, run.ID)
		return tk.Attempt == 2 && tk.Status == store.StatusDeferred
	})
	require.Equal(t, wake, steps(t, e, tk.ID)["cairn:sleep#1"], "the wake time is the first attempt's")
	w, ok := durableWaitOf(t, e, tk.ID)
	require.True(t, ok)
	require.WithinDuration(t, clock.now().Add(30*time.Minute), *w.until, time.Minute)
	clock.advance(30 * time.Minute)
	require.NoError(t, e2.Signal(ctx, tk.ID))
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 30*time.Second).Status)
	require.Equal(t, int64(1), calls.Load(), "step one ran once")
	require.JSONEq(t, `{"one": 1}`, string(onlyTask(t, e, run.ID).Output))
}

// signalTask registers a one-task workflow whose handler is run.
func signalTask(t *testing.T, e env, name string, run engine.Handler) {
	t.Helper()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: name, Tasks: []engine.Task{{Name: "only", Run: run,
		Retry: engine.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Millisecond, NoJitter: true}}}}))
}

func TestAwaitSignalTakesOneSentBefore(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	started, gate := make(chan int64, 1), make(chan struct{})
	signalTask(t, e, "before", func(ctx context.Context, h *engine.TaskHandle) error {
		started <- h.TaskID()
		<-gate
		p, err := h.AwaitSignal(ctx, "go", 0)
		if err != nil {
			return err
		}
		return h.SetOutput(p)
	})
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "before", nil)
	require.NoError(t, err)
	id := <-started
	require.NoError(t, e.eng.SendSignal(ctx, id, "go", map[string]int{"n": 7}))
	close(gate)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 30*time.Second).Status)
	require.JSONEq(t, `{"n": 7}`, string(onlyTask(t, e, run.ID).Output))
	sigs, err := e.st.SignalListByTask(ctx, id)
	require.NoError(t, err)
	require.Len(t, sigs, 1)
	require.NotNil(t, sigs[0].ConsumedAt)
	require.Equal(t, 1, *sigs[0].ConsumedAttempt)
	_, wait := steps(t, e, id)["cairn:signal#1/wait"]
	require.False(t, wait, "a signal already there is taken without a wait")
}

func TestAwaitSignalParksUntilSent(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}} })
	signalTask(t, e, "after", func(ctx context.Context, h *engine.TaskHandle) error {
		p, err := h.AwaitSignal(ctx, "go", time.Hour)
		if err != nil {
			return err
		}
		return h.SetOutput(p)
	})
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "after", nil)
	require.NoError(t, err)
	id := onlyTask(t, e, run.ID).ID
	var w durableWait
	eventually(t, 30*time.Second, "the wait to show in cairn_durable_waits", func() bool {
		var ok bool
		w, ok = durableWaitOf(t, e, id)
		return ok
	})
	require.Equal(t, durableWait{kind: store.WaitKindSignal, name: "go", until: w.until}, w)
	require.NotNil(t, w.until, "the deadline is stored")
	require.NoError(t, e.eng.SendSignal(ctx, id, "other", "not this one"))
	require.NoError(t, e.eng.SendSignal(ctx, id, "go", []string{"a", "b"}))
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 30*time.Second).Status)
	require.JSONEq(t, `["a", "b"]`, string(onlyTask(t, e, run.ID).Output))
	sigs, err := e.st.SignalListByTask(ctx, id)
	require.NoError(t, err)
	require.Len(t, sigs, 2)
	require.Nil(t, sigs[0].ConsumedAt, "a signal of another name stays")
	require.NotNil(t, sigs[1].ConsumedAt)
}

func TestAwaitSignalTimesOut(t *testing.T) {
	t.Parallel()
	var clock offsetClock
	e := setup(t, clock.config)
	got := make(chan error, 1)
	signalTask(t, e, "timeout", func(ctx context.Context, h *engine.TaskHandle) error {
		_, err := h.AwaitSignal(ctx, "never", time.Hour)
		got <- err
		return nil
	})
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "timeout", nil)
	require.NoError(t, err)
	id := onlyTask(t, e, run.ID).ID
	eventually(t, 30*time.Second, "the task to wait", func() bool { _, ok := durableWaitOf(t, e, id); return ok })
	clock.advance(time.Hour)
	require.NoError(t, e.eng.Signal(ctx, id))
	select {
	case err := <-got:
		require.ErrorIs(t, err, engine.ErrWaitTimeout)
	case <-time.After(30 * time.Second):
		t.Fatal("the wait never timed out")
	}
	require.JSONEq(t, `{"timeout": true}`, steps(t, e, id)["cairn:signal#1"], "the timeout is journaled")
	// A signal sent after the timeout is not taken by it.
	waitRun(t, e.st, run.ID, 30*time.Second)
	require.ErrorIs(t, e.eng.SendSignal(ctx, id, "never", 1), engine.ErrInvalidState, "the task finished")
}

func TestAwaitSignalTakesEachSignalOnceAcrossAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	type outcome struct {
		Payloads []string `json:"payloads"`
		Timeouts int      `json:"timeouts"`
	}
	signalTask(t, e, "twice", func(ctx context.Context, h *engine.TaskHandle) error {
		var out outcome
		await := func(timeout time.Duration) error {
			p, err := h.AwaitSignal(ctx, "x", timeout)
			switch {
			case errors.Is(err, engine.ErrWaitTimeout):
				out.Timeouts++
			case err != nil:
				return err
			default:
				out.Payloads = append(out.Payloads, string(p))
			}
			return nil
		}
		// Two awaits, one signal: the second times out.
		if err := await(0); err != nil {
			return err
		}
		if err := await(50 * time.Millisecond); err != nil {
			return err
		}
		if h.Attempt() == 1 {
			// A second signal, then a failure: the next attempt replays
			// both awaits from the journal, and takes the new signal
			// with a third.
			if err := e.eng.SendSignal(ctx, h.TaskID(), "x", "p2"); err != nil {
				return err
			}
			return errors.New("fail the first attempt")
		}
		if err := await(0); err != nil {
			return err
		}
		return h.SetOutput(out)
	})
	start(t, e.eng)
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "twice", nil)
	require.NoError(t, err)
	id := onlyTask(t, e, run.ID).ID
	require.NoError(t, e.eng.SendSignal(ctx, id, "x", "p1"))
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 30*time.Second).Status)
	var out outcome
	require.NoError(t, json.Unmarshal(onlyTask(t, e, run.ID).Output, &out))
	require.Equal(t, outcome{Payloads: []string{`"p1"`, `"p2"`}, Timeouts: 1}, out)
	sigs, err := e.st.SignalListByTask(ctx, id)
	require.NoError(t, err)
	require.Len(t, sigs, 2)
	require.Equal(t, 1, *sigs[0].ConsumedAttempt, "p1 taken by the first attempt")
	require.Equal(t, 2, *sigs[1].ConsumedAttempt, "p2 taken once, by the second")
}

func TestSendSignalRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	signalTask(t, e, "target", func(ctx context.Context, h *engine.TaskHandle) error { return nil })
	ctx := context.Background()
	run, err := e.eng.Enqueue(ctx, "target", nil)
	require.NoError(t, err)
	id := onlyTask(t, e, run.ID).ID
	require.ErrorIs(t, e.eng.SendSignal(ctx, id+1000, "go", nil), engine.ErrNotFound)
	require.ErrorIs(t, e.eng.SendSignal(ctx, id, "", nil), engine.ErrInvalidInput)
	require.ErrorIs(t, e.eng.SendSignal(ctx, id, "go", func() {}), engine.ErrInvalidInput)
	require.ErrorIs(t, e.eng.SendSignal(ctx, id, "go", json.RawMessage(`"\u0000"`)), engine.ErrInvalidInput)
	sigs, err := e.st.SignalListByTask(ctx, id)
	require.NoError(t, err)
	require.Empty(t, sigs, "a refused signal stores nothing")
	require.NoError(t, e.eng.SendSignal(ctx, id, "go", nil), "a task not started yet takes signals")
	sigs, err = e.st.SignalListByTask(ctx, id)
	require.NoError(t, err)
	require.Len(t, sigs, 1)
	require.JSONEq(t, `null`, string(sigs[0].Payload))
}
