package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// waitEnv is a worker engine with a one-task workflow "one" and a
// two-task "two" whose first task is held until release gets a value
// (its error), and a second engine that runs no worker and never polls
// within a test's time: a WaitRun there returns only when the database's
// notification wakes it, as from another process.
type waitEnv struct {
	env
	waiter  *engine.Engine
	release chan error
}

func setupWait(t *testing.T) waitEnv {
	t.Helper()
	w := waitEnv{env: setup(t, nil), release: make(chan error)}
	held := func(ctx context.Context, h *engine.TaskHandle) error {
		select {
		case err := <-w.release:
			if err != nil {
				return engine.Permanent(err)
			}
			return h.SetOutput(map[string]int{"n": h.Attempt()})
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	require.NoError(t, w.eng.Register(engine.Workflow{Name: "one", Tasks: []engine.Task{{Name: "x", Run: held}}}))
	require.NoError(t, w.eng.Register(engine.Workflow{Name: "two", Tasks: []engine.Task{
		{Name: "a", Run: held},
		{Name: "b", Deps: []string{"a"}, Run: func(ctx context.Context, h *engine.TaskHandle) error {
			var in struct{ N int }
			if err := h.Input(&in); err != nil {
				return err
			}
			return h.SetOutput(map[string]int{"twice": 2 * in.N})
		}},
	}}))
	start(t, w.eng)
	w.waiter = newEngine(t, w.db, engine.Config{DatabaseURL: w.db.URL, NoWorker: true, PollInterval: time.Hour, Logger: testLogger(t)})
	start(t, w.waiter)
	return w
}

// waitAsync starts WaitRun on the waiting engine with a deadline shorter
// than any re-read: it can only return by being woken.
func (w waitEnv) waitAsync(t *testing.T, runID int64) <-chan waitOutcome {
	out := make(chan waitOutcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		r, err := w.waiter.WaitRun(ctx, runID)
		out <- waitOutcome{r, err}
	}()
	return out
}

type waitOutcome struct {
	r   *engine.RunResult
	err error
}

func TestWaitRunIsWokenWhenAOneTaskRunCompletes(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	run, err := w.eng.Enqueue(context.Background(), "one", nil)
	require.NoError(t, err)
	got := w.waitAsync(t, run.ID)
	eventually(t, 5*time.Second, "the run marked awaited", func() bool {
		var awaited bool
		require.NoError(t, w.db.SQL.QueryRow(`SELECT awaited FROM cairn.run_rows WHERE id = $1`, run.ID).Scan(&awaited))
		return awaited
	})
	w.release <- nil
	o := <-got
	require.NoError(t, o.err)
	require.Equal(t, store.RunCompleted, o.r.Status)
	require.NoError(t, o.r.Err())
	require.NotNil(t, o.r.StartedAt)
	require.NotNil(t, o.r.FinishedAt)
	var out struct{ N int }
	require.NoError(t, o.r.Output("x", &out))
	require.Equal(t, 1, out.N)
	require.ErrorIs(t, o.r.Output("nope", &out), engine.ErrNotFound)
}

func TestWaitRunReturnsAFailedDAGWithItsErrors(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	run, err := w.eng.Enqueue(context.Background(), "two", map[string]int{})
	require.NoError(t, err)
	got := w.waitAsync(t, run.ID)
	w.release <- errors.New("no luck")
	o := <-got
	require.NoError(t, o.err)
	require.Equal(t, store.RunFailed, o.r.Status)
	var re *engine.RunError
	require.ErrorAs(t, o.r.Err(), &re)
	require.Equal(t, map[string]string{"a": "permanent: no luck"}, re.Errors)
	require.Equal(t, fmt.Sprintf("run %d failed: a: permanent: no luck", run.ID), re.Error())
	require.Len(t, o.r.Tasks, 2)
	require.Equal(t, store.StatusSkipped, o.r.Tasks[1].Status)
}

func TestWaitRunOfAnEndedRunReturnsAtOnce(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	ctx := context.Background()
	run, err := w.eng.Enqueue(ctx, "two", map[string]int{})
	require.NoError(t, err)
	w.release <- nil
	waitRun(t, w.st, run.ID, 10*time.Second)
	r, err := w.waiter.WaitRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, r.Status)
	var out struct{ Twice int }
	require.NoError(t, r.Output("b", &out))
	require.Equal(t, 2, out.Twice)
}

func TestWaitRunRefusesAnUnknownRunAndHonoursItsContext(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	_, err := w.waiter.WaitRun(context.Background(), 987654)
	require.ErrorIs(t, err, engine.ErrNotFound)

	run, err := w.eng.Enqueue(context.Background(), "one", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := w.waiter.WaitRun(ctx, run.ID); done <- err }()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	w.release <- nil
	waitRun(t, w.st, run.ID, 10*time.Second)
}

// An engine without a DatabaseURL (no listener) reads the run every
// PollInterval instead.
func TestWaitRunWithoutAListenerPolls(t *testing.T) {
	t.Parallel()
	w := setupWait(t)
	poller := newEngine(t, w.db, engine.Config{NoWorker: true, PollInterval: 50 * time.Millisecond, Logger: testLogger(t)})
	run, err := w.eng.Enqueue(context.Background(), "one", nil)
	require.NoError(t, err)
	got := make(chan waitOutcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		r, err := poller.WaitRun(ctx, run.ID)
		got <- waitOutcome{r, err}
	}()
	w.release <- nil
	o := <-got
	require.NoError(t, o.err)
	require.Equal(t, store.RunCompleted, o.r.Status)
}
