package executor_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/executor"
)

// exec is an execution of a test.
type exec struct{ executor.Execution }

func (x *exec) Exec() *executor.Execution { return &x.Execution }

func newExec(id int64) *exec {
	x := &exec{}
	x.Task.ID = id
	x.Started = time.Now()
	return x
}

type ctxKey struct{}

// Go registers each execution and runs it in its own goroutine under a
// context of the handlers' (values of the parent, a cancel of its own);
// Wait and Returned wait for every handler.
func TestRunningGoAndWait(t *testing.T) {
	var r executor.Running[*exec]
	require.Zero(t, r.Count())
	r.CancelAll(errShutdown) // before Open: nothing to cancel
	release := make(chan struct{})
	values := make(chan any, 2)
	r.Open(context.WithValue(context.Background(), ctxKey{}, "v"), func(ctx context.Context, x *exec) {
		values <- ctx.Value(ctxKey{})
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	a, b := newExec(1), newExec(2)
	r.Go(a)
	r.Go(b)
	require.Equal(t, "v", <-values)
	require.Equal(t, "v", <-values)
	require.Equal(t, 2, r.Count())
	got, ok := r.Load(1)
	require.True(t, ok)
	require.Same(t, a, got)
	_, ok = r.Load(3)
	require.False(t, ok)
	ids := map[int64]*exec{}
	r.Range(func(id int64, x *exec) bool { ids[id] = x; return true })
	require.Equal(t, map[int64]*exec{1: a, 2: b}, ids)

	// One handler cancelled by its own Cancel, the other let go.
	returned := r.Returned()
	a.Cancel(errLost)
	close(release)
	<-returned
	r.Wait()
	r.Delete(1)
	require.Equal(t, 1, r.Count(), "an execution stays until its write committed (Delete)")
}

// CancelAll cancels the context of every handler with its cause.
func TestRunningCancelAll(t *testing.T) {
	var r executor.Running[*exec]
	causes := make(chan error, 3)
	r.Open(context.Background(), func(ctx context.Context, _ *exec) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
	})
	for id := range int64(3) {
		r.Go(newExec(id))
	}
	r.CancelAll(errShutdown)
	r.Wait()
	for range 3 {
		require.ErrorIs(t, <-causes, errShutdown)
	}
}

// The heartbeat's side lists the executions and stops the handlers of
// tasks no longer held: not those finished or started after the
// heartbeat asked.
func TestLeases(t *testing.T) {
	var r executor.Running[*exec]
	causes := map[int64]chan error{}
	r.Open(context.Background(), func(ctx context.Context, x *exec) {
		<-ctx.Done()
		causes[x.Task.ID] <- context.Cause(ctx)
	})
	asked := time.Now()
	held, gone, finished, late := newExec(1), newExec(2), newExec(3), newExec(4)
	for _, x := range []*exec{held, gone, finished} {
		x.Started = asked.Add(-time.Second)
	}
	late.Started = asked.Add(time.Second)
	finished.Finished.Store(true)
	for _, x := range []*exec{held, gone, finished, late} {
		causes[x.Task.ID] = make(chan error, 1)
		r.Go(x)
	}
	var logs bytes.Buffer
	l := executor.Leases[*exec]{Execs: &r, Log: slog.New(slog.NewTextHandler(&logs, nil)), Lost: errLost}
	require.True(t, l.Running(1))
	require.False(t, l.Running(5))
	require.ElementsMatch(t, []int64{1, 2, 3, 4}, l.Handled())

	l.LoseAbsent(context.Background(), map[int64]bool{1: true}, asked)
	require.ErrorIs(t, <-causes[2], errLost)
	require.Contains(t, logs.String(), "lease lost: stopping handler")
	r.CancelAll(errShutdown)
	r.Wait()
	for _, id := range []int64{1, 3, 4} {
		require.True(t, errors.Is(<-causes[id], errShutdown), "task %d kept its handler", id)
	}
}
