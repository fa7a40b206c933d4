package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/store"
)

var (
	errLost     = errors.New("lost")
	errShutdown = errors.New("shutdown")
	errTimeout  = errors.New("timeout")
	errPerm     = errors.New("permanent")
)

func newExecutor() *executor.Executor {
	return executor.New(executor.Config{Clock: time.Now, Rand: func() float64 { return 0.5 },
		Lost: errLost, Shutdown: errShutdown, Timeout: errTimeout,
		Permanent:  func(err error) bool { return errors.Is(err, errPerm) },
		RetryAfter: func(error) (time.Duration, bool) { return 0, false }})
}

// attempt runs one attempt of a task at attempt 1 of 3 with handle as
// its handler and timeout, and returns the outcome.
func attempt(t *testing.T, ctx context.Context, timeout time.Duration, handle func(ctx context.Context, ex *executor.Execution) error) (store.TransitionItem, error, *executor.Execution) {
	t.Helper()
	ex := &executor.Execution{}
	ex.Init(store.Claimed{Task: store.Task{ID: 7, RunID: 3, Attempt: 1, MaxAttempts: 3, Workflow: "w", Name: "t"}}, time.Now())
	ctx, cancel := context.WithCancelCause(ctx)
	ex.Cancel = cancel
	defer ex.Cancel(nil)
	item, cause := newExecutor().Run(ctx, ex, executor.Attempt{Timeout: timeout,
		Handle: func(ctx context.Context) error { return handle(ctx, ex) },
		Output: func() json.RawMessage { return json.RawMessage(`{"ok":true}`) },
		Detail: func(stack []byte) json.RawMessage {
			if stack != nil {
				return json.RawMessage(`{"stack":true}`)
			}
			return nil
		},
		Retry: func() outcome.Policy {
			return outcome.Policy{InitialDelay: time.Second, MaxDelay: time.Minute, BackoffFactor: 2}
		}})
	return item, cause, ex
}

func TestRunCompletes(t *testing.T) {
	item, cause, ex := attempt(t, context.Background(), time.Minute, func(context.Context, *executor.Execution) error { return nil })
	require.NoError(t, cause)
	require.Equal(t, int64(7), item.TaskID)
	require.Equal(t, store.StatusCompleted, item.To)
	require.JSONEq(t, `{"ok":true}`, string(item.Output))
	require.True(t, ex.HoldsSlot.Load())
	require.Equal(t, store.StatusRunning, ex.RowState())
}

func TestRunErrorRetriesThenFailsWhenPermanent(t *testing.T) {
	item, _, _ := attempt(t, context.Background(), time.Minute, func(context.Context, *executor.Execution) error { return errors.New("boom") })
	require.Equal(t, store.StatusReady, item.To)
	require.Equal(t, "boom", *item.Error)

	item, _, _ = attempt(t, context.Background(), time.Minute, func(context.Context, *executor.Execution) error { return errPerm })
	require.Equal(t, store.StatusFailed, item.To)
}

func TestRunPanicIsAFailureWithItsStack(t *testing.T) {
	item, _, _ := attempt(t, context.Background(), time.Minute, func(context.Context, *executor.Execution) error { panic("oops") })
	require.Equal(t, store.StatusReady, item.To)
	require.Equal(t, "panic: oops", *item.Error)
	require.JSONEq(t, `{"stack":true}`, string(item.Detail))
}

func TestRunTimeout(t *testing.T) {
	item, cause, _ := attempt(t, context.Background(), time.Millisecond, func(ctx context.Context, _ *executor.Execution) error {
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, cause, errTimeout)
	require.Equal(t, store.StatusReady, item.To)
	require.True(t, strings.HasPrefix(*item.Error, "timeout after 1ms"), *item.Error)
}

func TestRunCancelledByShutdownIsInterrupted(t *testing.T) {
	item, cause, _ := attempt(t, context.Background(), time.Minute, func(ctx context.Context, ex *executor.Execution) error {
		ex.Cancel(errShutdown)
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, cause, errShutdown)
	require.Equal(t, store.StatusInterrupted, item.To)
	require.True(t, item.Uncounted)

	// A task parked in a durable wait goes back to ready.
	item, _, _ = attempt(t, context.Background(), time.Minute, func(ctx context.Context, ex *executor.Execution) error {
		ex.InWait.Store(true)
		ex.Cancel(errShutdown)
		return ctx.Err()
	})
	require.Equal(t, store.StatusReady, item.To)
}

func TestRunLostWritesNothing(t *testing.T) {
	item, cause, _ := attempt(t, context.Background(), time.Minute, func(ctx context.Context, ex *executor.Execution) error {
		ex.Cancel(errLost)
		return context.Cause(ctx)
	})
	require.ErrorIs(t, cause, errLost)
	require.Zero(t, item.TaskID)
}

func TestRowState(t *testing.T) {
	var ex executor.Execution
	require.Equal(t, store.StatusRunning, ex.RowState())
	ex.Parked.Store(true)
	require.Equal(t, store.StatusDeferred, ex.RowState())
	ex.Unsure.Store(true)
	require.Equal(t, "", ex.RowState())
}
